#!/usr/bin/env bash
# README table for the Stable Diffusion 2.1 and ControlNet examples (issue 4), and the dp
# partitioner benchmark. Usage: bench/partition/report.sh [build-dir]
set -euo pipefail
build=${1:-build/release}
root=$(cd "$(dirname "$0")/../.." && pwd)
"$build/bench/partition/partition_report" "$root/resources"
echo
if [ -x "$build/bench/partition/bench_partition" ]; then
  echo "## dp partitioner (1000 layers × 64 virtual stages, target ≤ 1 s)"
  "$build/bench/partition/bench_partition" --benchmark_filter='BM_DpPartition/1000' --benchmark_min_time=0.2 2>/dev/null | grep -E '^BM_'
fi
