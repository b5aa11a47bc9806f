#!/usr/bin/env bash
# Ours against the Zero Bubble authors' reference schedulers (bench/reference/compare.py). Needs
# their scheduler files in reference/zero-bubble/ (or $PIPESTUDIO_ZB_REFERENCE); says so and
# exits 0 without them. The reference's orders are cached next to the CLI.
set -euo pipefail
build=${1:-build/release}
root=$(cd "$(dirname "$0")/../.." && pwd)
echo "### Against the authors' reference schedulers"
echo
python3 "$root/bench/reference/compare.py" --cli "$build/app/pipestudio-cli"
