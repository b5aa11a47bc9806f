#!/usr/bin/env bash
# Prints the viz benchmark table (markdown) for the README: replot of a p=64, m=1024 plan at
# full view and zoomed in (median ms, view memory), and window start to a drawn default workspace.
set -euo pipefail
build="${1:-${BUILD_DIR:-build/release}}"
bin="$build/bench/viz/bench_viz"
if [[ ! -x "$bin" ]]; then
  echo "bench_viz not built ($bin)" >&2
  exit 1
fi
json="$(mktemp)"
trap 'rm -f "$json"' EXIT
QT_QPA_PLATFORM=offscreen "$bin" --benchmark_format=json >"$json" 2>/dev/null
python3 - "$json" <<'PY'
import json, sys
runs = {b["name"].split("/")[0]: b for b in json.load(open(sys.argv[1]))["benchmarks"]}
def get(name, key):
    b = runs.get(name)
    return b.get(key) if b else None
print("| Timeline benchmark (offscreen) | median wall | CPU per replot | target | view memory | notes |")
print("|---|---|---|---|---|---|")
for name, label in (("BM_ReplotFullView", "replot, p=64 m=1024, full view"),
                    ("BM_ReplotZoomedIn", "replot, p=64 m=1024, zoomed to 2 %")):
    ms, mb, ops = get(name, "median_ms"), get(name, "view_mb"), get(name, "ops")
    src = runs.get(name, {}).get("label", "")
    if ms is None:
        continue
    cpu = runs[name].get("cpu_time", 0.0)
    data_mb = get(name, "timeline_data_mb") or 0.0
    print(f"| {label} | {ms:.2f} ms | {cpu:.2f} ms | ≤ 16 ms | {mb:.0f} MB RSS (+{data_mb:.0f} MB lanes) | {int(ops)} ops, {src} |")
ms = get("BM_StartToDrawnDefaultWorkspace", "median_ms")
if ms is not None:
    print(f"| window to drawn default workspace (solve included) | {ms:.0f} ms | | < 2000 ms | | |")
PY
