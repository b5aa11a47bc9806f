#!/usr/bin/env bash
# Opens the app on the bundled default workspace; without the GUI (or without a display and
# not under `make run` interactively), plans the default example headless and prints a summary.
set -euo pipefail
build=${1:-build/release}
root=$(cd "$(dirname "$0")/.." && pwd)
workspace="$root/resources/workspaces/default.pipestudio"
if [ -x "$build/app/gui/pipestudio" ] && { [ -n "${DISPLAY:-}" ] || [ -n "${WAYLAND_DISPLAY:-}" ] || [ -n "${QT_QPA_PLATFORM:-}" ]; }; then
  exec "$build/app/gui/pipestudio" "$workspace"
fi
if [ -x "$build/app/gui/pipestudio" ]; then
  echo "run-default: no display (DISPLAY unset); planning the default workspace headless instead." >&2
fi
cli="$build/app/pipestudio-cli"
"$cli" validate "$root"/resources/models/*.json "$root"/resources/clusters/*.json
# The same solver settings as resources/workspaces/default.pipestudio.
if "$cli" schedules >/dev/null 2>&1; then
  "$cli" plan --model "$root/resources/models/stable-diffusion-2.1.json" \
    --cluster "$root/resources/clusters/a100-1x8-nvlink.json" --schedule 1f1b --devices 8 --microbatches 16 \
    --partition diffusionpipe --fill greedy
fi
