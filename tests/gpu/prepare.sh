#!/usr/bin/env bash
# Stages what tests/gpu/run.sh needs on a bare GPU node (CUDA toolkit, CMake, ninja; no Debian
# packages, no network) into .gpu/ (git-ignored), from a full build here:
#   .gpu/bin/     pipestudio-exec, executor_tests, pipestudio-cli (x86-64, built against the same
#                 CUDA major version as the node's)
#   .gpu/lib/     the CLI's shared libraries that a bare node lacks (CBC, SQLite, libssh, PCRE2, ...)
#   .gpu/plans/   the plans run.sh executes, made here by pipestudio-cli
#   .gpu/third_party/nlohmann/json.hpp   for the fallback build of the executor alone
#
#   tests/gpu/prepare.sh [BUILD_DIR]     (default build/release; builds the three targets first)
# Then, on the node: OUT=<results> tests/gpu/run.sh (it finds .gpu/ beside it).
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$here/build/release}
stage=$here/.gpu
cmake --build "$build" -j2 --target pipestudio-exec executor_tests pipestudio-cli >/dev/null

rm -rf "$stage"
mkdir -p "$stage/bin" "$stage/lib" "$stage/plans" "$stage/third_party/nlohmann"
cp "$build/executor/pipestudio-exec" "$build/tests/executor/executor_tests" "$build/app/pipestudio-cli" "$stage/bin/"
# The C library, libstdc++ and libgcc of the node are newer than ours and stay theirs.
ldd "$build/app/pipestudio-cli" | awk '$3 ~ /^\// {print $3}' |
  grep -v -E '/(libc|libm|libstdc\+\+|libgcc_s|libpthread|libdl|librt|libresolv)\.so' |
  while read -r lib; do cp -L "$lib" "$stage/lib/"; done
json=$(printf '#include <nlohmann/json.hpp>\n' | g++ -x c++ -M - 2>/dev/null | tr ' \\' '\n\n' | grep '/nlohmann/json.hpp$' | head -1)
cp "$json" "$stage/third_party/nlohmann/json.hpp"

cli=$stage/bin/pipestudio-cli
gpu=$here/tests/gpu
# Four plan devices on the one GPU (cuda-single): the GPT model under three schedules, and
# Stable Diffusion's frozen encoders filled into the bubbles of its partitioned UNet.
for schedule in 1f1b zb-h1 zb-v; do
  "$cli" plan --model "$gpu/gpt-small.model.json" --cluster "$gpu/four-on-one.cluster.json" \
    --schedule "$schedule" --devices 4 --microbatches 8 -o "$stage/plans/gpt-$schedule.plan.json" >/dev/null
done
"$cli" plan --model "$here/resources/models/stable-diffusion-2.1.json" --cluster "$gpu/four-on-one.cluster.json" \
  --schedule 1f1b --devices 4 --microbatches 8 --partition diffusionpipe --fill greedy \
  -o "$stage/plans/sd-filled.plan.json" >/dev/null
# One device, for --profile: the GPT model (shapes) and the synthetic one (layer times).
cp "$gpu/gpt-small-1dev.plan.json" "$stage/plans/gpt-1dev.plan.json"
# The same under an FP8 recipe: its block GEMMs run as FP8 through cuBLASLt.
"$cli" plan --model "$gpu/gpt-small.model.json" --cluster "$gpu/one-gpu.cluster.json" --schedule 1f1b --devices 1 \
  --microbatches 8 --partition uniform --precision fp8 -o "$stage/plans/gpt-fp8-1dev.plan.json" >/dev/null
"$cli" plan --model "$here/resources/models/synthetic-measured.json" --cluster "$gpu/one-gpu.cluster.json" \
  --schedule 1f1b --devices 1 --microbatches 2 -o "$stage/plans/synthetic-1dev.plan.json" >/dev/null
du -sh "$stage"
