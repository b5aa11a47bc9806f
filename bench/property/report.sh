#!/usr/bin/env bash
# The property suite (tests/property) on its larger grid: more bundled models and clusters,
# every partitioner, more microbatch counts, offload ratios, memory limits and schedules
# (docs/benchmarks.md, "Property suite"). `make test` runs the default grid. Usage:
# bench/property/report.sh [build-dir]
set -euo pipefail
build=${1:-build/release}
exe="$build/tests/property/property_tests"
[ -x "$exe" ] || { echo "property_tests not built in $build" >&2; exit 1; }
exe=$(cd "$(dirname "$exe")" && pwd)/property_tests
echo "### Property suite, full grid"
echo
start=$(date +%s)
# Run from the repository root: a failure's re-run command names resources/… relative to it.
cd "$(dirname "$0")/../.."
if PIPESTUDIO_PROPERTY_GRID=full "$exe" --gtest_brief=1; then status=passed; else status=FAILED; fi
echo
echo "full grid: $status in $(( $(date +%s) - start )) s"
[ "$status" = passed ]
