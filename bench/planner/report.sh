#!/usr/bin/env bash
# Prints the README table: schedule, ops, generate+simulate time (p=64, m=1024, one core).
set -euo pipefail
build=${1:-build/release}
exe="$build/bench/planner/bench_planner"
[ -x "$exe" ] || { echo "bench_planner not built in $build" >&2; exit 1; }
echo "### Schedule generation + simulation, p=64, m=1024 ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'))"
echo
echo "| schedule | ops | time (ms) |"
echo "|---|---:|---:|"
"$exe" --benchmark_min_time=0.2 --benchmark_format=csv 2>/dev/null | python3 -c '
import csv, sys
rows = [l for l in sys.stdin if l.startswith("\"generate_simulate/")]
for r in csv.reader(rows):
    name = r[0].split("/")[1].strip("\"")
    # columns: name,iterations,real_time,cpu_time,time_unit,...,ops (last user counter)
    print(f"| {name} | {int(float(r[-1])) if r[-1] else 0} | {float(r[2]):.1f} |")
'
echo
echo "### V-shape schedules: activation memory and bubble against 1F1B"
echo
python3 "$(dirname "$0")/vshape_table.py" "$build/app/pipestudio-cli"
