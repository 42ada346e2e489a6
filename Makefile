# The two commands of the quick start: `make dev` and `make test`.
#   make test   the build's tests, then the sanitizer pass: the unit tests
#               with ASan+UBSan and each fuzz target for a short time
#               ($(SAN_BUILD), clang)
#   make fuzz   each fuzz target for FUZZ_SECONDS (FUZZ=NAME for one)
BUILD ?= build
SAN_BUILD ?= build-asan
JOBS ?= $(shell nproc)
FUZZ_SECONDS ?= 300
FUZZ ?=

.PHONY: deps configure build dev test sanitize fuzz clean

deps:
	@bash scripts/install-deps.sh

configure: deps
	@if [ ! -f $(BUILD)/build.ninja ]; then cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo; fi

build: configure
	cmake --build $(BUILD) -j $(JOBS)

dev: build
	$(BUILD)/tide dev

# Debug (assertions on), unoptimised with line tables only: the cheapest
# build to compile; the sanitizers name file and line.
sanitize: deps
	@if [ ! -f $(SAN_BUILD)/build.ninja ]; then cmake -S . -B $(SAN_BUILD) -G Ninja \
	  -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-O0 -gline-tables-only" \
	  -DCMAKE_CXX_COMPILER=clang++ -DTIDE_FUZZ=ON; fi
	cmake --build $(SAN_BUILD) -j $(JOBS)

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)
	$(MAKE) sanitize
	cd $(SAN_BUILD) && ctest --output-on-failure -j $(JOBS)

fuzz: sanitize
	fuzz/run.sh $(SAN_BUILD) $(FUZZ_SECONDS) $(FUZZ)

clean:
	rm -rf $(BUILD) $(SAN_BUILD)
