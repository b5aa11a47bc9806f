# PipeStudio: `make run` and `make test` are the two commands a newcomer needs.
# Both install missing Debian packages first (packaging/install-deps.sh), then build.

JOBS ?= 2
PRESET ?= release
BUILD_DIR := build/$(PRESET)
# CI builds treat warnings in our own code as errors (docs/style.md).
WERROR := $(if $(CI),ON,OFF)
CTEST_ARGS ?=

.PHONY: run test bench fidelity package deps configure build clean format format-check tidy

deps:
	@bash packaging/install-deps.sh

configure: deps
	@cmake --preset $(PRESET) -DPIPESTUDIO_WERROR=$(WERROR) >/dev/null || cmake --preset $(PRESET) -DPIPESTUDIO_WERROR=$(WERROR)

build: configure
	@cmake --build $(BUILD_DIR) -j$(JOBS)

run: build
	@bash packaging/run-default.sh $(BUILD_DIR)

test: build
	@cd $(BUILD_DIR) && QT_QPA_PLATFORM=offscreen ctest --output-on-failure -j$(JOBS) --timeout 600 $(CTEST_ARGS)

bench: build
	@bash bench/run.sh $(BUILD_DIR)

# Predicted vs measured on published runs (bench/fidelity/published.json); README tables.
fidelity: build
	@$(BUILD_DIR)/bench/fidelity/pipestudio-fidelity --markdown

package: build
	@cd $(BUILD_DIR) && cpack -G DEB

format:
	@git ls-files -z '*.cpp' '*.hpp' '*.cu' | xargs -0 $$(command -v clang-format-14 || echo clang-format) -i

# CI runs both (.ci/run): the tree matches .clang-format; clang-tidy finds nothing in the C++
# files changed since TIDY_BASE (default: the last commit).
format-check: deps
	@.ci/format-check

TIDY_BASE ?= HEAD~1
tidy: configure
	@.ci/tidy-changed $(BUILD_DIR) $(TIDY_BASE)

clean:
	@rm -rf build
