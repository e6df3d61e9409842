# The front door. `make demo` runs the main job, `make test` runs every test; both install the
# missing Debian packages first (scripts/install-deps) and build.
MAKEFLAGS += --no-print-directory
JOBS ?= $(shell nproc)
PRESET ?= release
# No test is rerun when it fails: a race must not pass on a second try. Only a launch that never
# reached the program is retried, by tests/mpirun.sh.
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

# The main job: the King James Bible as byte tokens (prepared once into data/kjv), a small GPT
# trained with 4 ranks of WallFacer-C (configs/gpt-kjv.toml), the loss plot, and a sample.
DEMO_OUT ?= runs/gpt-kjv
demo: build
	@scripts/prepare-kjv data/kjv build/wallfacer
	@scripts/wallfacer-mpirun 4 train --config configs/gpt-kjv.toml --out $(DEMO_OUT) --overwrite
	@echo "--- sample from $(DEMO_OUT) ---"
	@build/wallfacer sample --ckpt $(DEMO_OUT) --prompt "And God said" --tokens 300

bench: build
	build/wallfacer bench kernel

format:
	clang-format -i $$(git ls-files '*.cpp' '*.h')

clean:
	rm -rf build build-asan
