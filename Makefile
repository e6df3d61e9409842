# The front door. `make demo` runs the main job, `make test` runs every test; both install the
# missing Debian packages first (scripts/install-deps) and build.
MAKEFLAGS += --no-print-directory
JOBS ?= $(shell nproc)
PRESET ?= release
# No test is rerun when it fails: a race must not pass on a second try. Only a launch that never
# reached the program is retried, by tests/mpirun.sh.
CTEST = ctest --output-on-failure -j $(JOBS)

.PHONY: all deps build build-asan build-fuzz test test-stages test-asan fuzz sweep demo bench validate-planner results format clean

all: build

deps:
	@scripts/install-deps

build: deps
	@cmake --preset $(PRESET) $(if $(CI),-DWALLFACER_WERROR=ON,) >/dev/null
	@cmake --build build -j $(JOBS)

build-asan: deps
	@cmake --preset asan >/dev/null
	@cmake --build build-asan -j $(JOBS) --target wallfacer_unit_tests

# The libFuzzer targets (clang, ASan+UBSan): tests/fuzz, docs/faults.md "Fuzzing".
build-fuzz: deps
	@cmake --preset fuzz >/dev/null
	@cmake --build build-fuzz -j $(JOBS)

# All tests of the release build, then the unit tests again under ASan+UBSan, then every fuzz
# target for 15 s from its committed corpus (never repeated: a crash fails at once). Each stage
# prints its time (scripts/timed), and the whole run its total: CI's budget is 45 minutes cold on
# 2 cores.
TIMED = scripts/timed
test:
	@$(TIMED) "test: all stages" $(MAKE) test-stages

test-stages:
	@$(TIMED) "build (release)" $(MAKE) build
	@$(TIMED) "build (asan)" $(MAKE) build-asan
	@$(TIMED) "build (fuzz)" $(MAKE) build-fuzz
	@cd build && ../$(TIMED) "tests (release)" $(CTEST)
	@cd build-asan && ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=print_stacktrace=1 \
	  ../$(TIMED) "unit tests (asan)" $(CTEST) -L unit
	@cd build-fuzz && ../$(TIMED) "fuzz (15 s a target)" ctest --output-on-failure -j $(JOBS) -L fuzz

# Longer fuzzing: each target (or those in FUZZ_TARGETS) for FUZZ_SECONDS, one after another.
# New inputs are kept in FUZZ_DIR/NAME/corpus (outside the repository) for the next run; a
# crash prints the reproducer and how to commit it as a regression input.
FUZZ_SECONDS ?= 300
FUZZ_DIR ?= /tmp/wallfacer-fuzz
FUZZ_TARGETS ?= $(notdir $(wildcard tests/fuzz/corpus/*))
fuzz: build-fuzz
	@fail=0; for t in $(FUZZ_TARGETS); do \
	  tests/fuzz/run.sh build-fuzz/tests/fuzz/fuzz_$$t tests/fuzz/corpus/$$t $(FUZZ_SECONDS) \
	    $(FUZZ_DIR)/$$t --keep || fail=1; \
	done; exit $$fail

# Every case of the bad-input and fault sweep (docs/faults.md, "The sweep"); ctest runs a subset.
sweep: build
	python3 tests/faults/sweep.py --wf build/wallfacer --mpirun tests/mpirun.sh

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

# The calibrated cost model against measured attention times at P = 2 and 4 (a benchmark: run it on
# a quiet machine; docs/results.md).
validate-planner: build
	OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 bench/planner_validation.sh

# Every generated table in README.md and docs/*.md (<!-- generated: CMD --> ... <!-- end generated -->)
# rewritten with what its CMD prints from the raw data under docs/data/; ctest docs_generated fails
# when one differs.
results:
	python3 scripts/results.py

format:
	clang-format -i $$(git ls-files '*.cpp' '*.h')

clean:
	rm -rf build build-asan build-fuzz
