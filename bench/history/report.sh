#!/usr/bin/env bash
# Prints the history benchmarks as a README-ready markdown table (issue 6 targets).
# Usage: bench/history/report.sh [BUILD_DIR]
set -euo pipefail
build=${1:-build/release}
exe="$build/bench/history/bench_history"
if [ ! -x "$exe" ]; then
  echo "bench_history not built in $build" >&2
  exit 1
fi
echo "### History (core/history), one core"
echo
echo "| benchmark | wall time per run | CPU time per run | events/s (CPU) | target |"
echo "|---|---:|---:|---:|---|"
"$exe" --benchmark_format=csv 2>/dev/null | awk -F, '
  /^name,/ { for (i = 1; i <= NF; ++i) col[$i] = i; next }
  NF > 5 {
    name = $col["name"]; gsub(/"/, "", name)
    t = $col["real_time"]; c = $col["cpu_time"]; unit = $col["time_unit"]; ips = $col["items_per_second"]
    target = "-"
    if (name ~ /IngestBinaryStream/) target = ">= 1M events/s"
    if (name ~ /ImportChromeJson/) target = ">= 300k events/s"
    if (name ~ /CompareTwo1MRuns/) target = "<= 1 s (1000 ms)"
    rate = (ips == "") ? "-" : sprintf("%.0f k", ips / 1000)
    printf "| %s | %.1f %s | %.1f %s | %s | %s |\n", name, t, unit, c, unit, rate, target
  }'
