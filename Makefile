# The two commands of the README: `make demo` and `make test`.
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: setup build demo test clean

setup:
	./scripts/setup.sh

build: setup
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release -DTERN_WERROR=ON $(CMAKE_FLAGS)
	cmake --build $(BUILD) -j $(JOBS)

demo: build
	BUILD=$(BUILD) ./scripts/demo.sh

# Then the end-to-end runs of the fast CPU path again as a CPU without
# AVX-512 runs them (tests/CMakeLists.txt, label "isa"). The tests' scratch
# folders live in a temp dir of this run's own, emptied first: checkpoints the
# tests share are never a stale build's.
TEST_TMP = $(abspath $(BUILD))/test-tmp
TEST_ENV = TMPDIR=$(TEST_TMP) TEST_TMPDIR=$(TEST_TMP)
test: build
	rm -rf $(TEST_TMP) && mkdir -p $(TEST_TMP)
	$(TEST_ENV) ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)
	if grep -qw avx512f /proc/cpuinfo; then \
	  $(TEST_ENV) TERN_CPU_ISA=avx2 ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS) -L isa; fi
	rm -rf $(TEST_TMP)

clean:
	rm -rf $(BUILD)
