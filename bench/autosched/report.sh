#!/usr/bin/env bash
# zb-auto at scale: prints the README table (bench/autosched/bench_autosched --table).
set -euo pipefail
build=${1:-build/release}
exe="$build/bench/autosched/bench_autosched"
[ -x "$exe" ] || { echo "bench_autosched not built in $build" >&2; exit 1; }
echo "### zb-auto (automatic zero-bubble scheduling under a memory limit) — $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), one core"
echo
"$exe" --table
echo
echo "Lower bound = max(busiest device F+B+W work, earliest start of a device + its work, memory slots × one microbatch round trip, one microbatch round trip). Times on a shared, loaded 2-core machine."
echo "Published heuristic = the authors' own greedy (zb.py manual_order/initial_solution for one stage per device, zbv.py for a V), ported; zb-auto's first answer. First answer = the first progress report; the rest of the default work budget (op steps, not time) improves it."
