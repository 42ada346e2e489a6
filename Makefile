# The two commands of the quick start: `make dev` and `make test`.
BUILD ?= build
JOBS ?= $(shell nproc)

.PHONY: deps configure build dev test clean

deps:
	@bash scripts/install-deps.sh

configure: deps
	@if [ ! -f $(BUILD)/build.ninja ]; then cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo; fi

build: configure
	cmake --build $(BUILD) -j $(JOBS)

dev: build
	$(BUILD)/tide dev

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

clean:
	rm -rf $(BUILD)
