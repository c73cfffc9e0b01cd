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
# AVX-512 runs them (tests/CMakeLists.txt, label "isa").
test: build
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)
	if grep -qw avx512f /proc/cpuinfo; then \
	  TERN_CPU_ISA=avx2 ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS) -L isa; fi

clean:
	rm -rf $(BUILD)
