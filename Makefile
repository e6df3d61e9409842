# The front door. `make demo` runs the main job, `make test` runs every test; both install the
# missing Debian packages first (scripts/install-deps) and build.
MAKEFLAGS += --no-print-directory
JOBS ?= $(shell nproc)
PRESET ?= release
CTEST = ctest --output-on-failure -j $(JOBS)

.PHONY: all deps build build-asan test test-asan demo bench format clean

all: build

deps:
	@scripts/install-deps

build: deps
	@cmake --preset $(PRESET) $(if $(CI),-DWALLFACER_WERROR=ON,) >/dev/null
	@cmake --build build -j $(JOBS)

build-asan: deps
	@cmake --preset asan >/dev/null
	@cmake --build build-asan -j $(JOBS) --target wallfacer_unit_tests

# All tests of the release build, then the unit tests again under ASan+UBSan.
test: build build-asan
	cd build && $(CTEST)
	cd build-asan && ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=print_stacktrace=1 \
	  $(CTEST) -L unit

demo: build
	build/wallfacer bench kernel

bench: build
	build/wallfacer bench kernel

format:
	clang-format -i $$(git ls-files '*.cpp' '*.h')

clean:
	rm -rf build build-asan
