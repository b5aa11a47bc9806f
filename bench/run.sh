#!/usr/bin/env bash
# Runs every benchmark program under the build tree and prints its table.
# Each bench/<module>/ may also ship a report.sh that prints README-ready tables.
set -euo pipefail
build=${1:-build/release}
root=$(cd "$(dirname "$0")/.." && pwd)
echo "# PipeStudio benchmarks — $(uname -m), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(date -u +%Y-%m-%d)"
for exe in "$build"/bench/*/bench_*; do
  [ -x "$exe" ] || continue
  echo; echo "## $(basename "$exe")"
  "$exe" --benchmark_min_time=0.2 2>&1
done
for report in "$root"/bench/*/report.sh; do
  [ -f "$report" ] || continue
  echo; bash "$report" "$build"
done
