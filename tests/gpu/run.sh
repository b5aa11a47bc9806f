#!/usr/bin/env bash
# GPU check of the executor (issues 7 and 32), in one go and rerunnable. On a machine with an
# NVIDIA GPU, the CUDA toolkit, CMake and ninja (no Debian packages, no network needed):
#
#   tests/gpu/prepare.sh                  here, on the build machine: stages .gpu/
#   OUT=DIR tests/gpu/run.sh              there: results, logs, traces and a history in DIR
#
# Binaries: the ones tests/gpu/prepare.sh staged in .gpu/bin (x86-64, same CUDA major version),
# with the CUDA, cuBLAS, CUPTI and NCCL libraries found on the node; where they cannot load, the
# executor alone is built there (preset executor-only, nlohmann-json from .gpu/third_party).
# Steps, each logged and timed, none stopping the others:
#   1. the GPU GoogleTests (cuda-single with 4 plan devices on one GPU; NCCL needs >= 2 GPUs);
#   2. cuda-single, 4 plan devices on the one GPU: GPT under 1f1b, zb-h1, zb-v, and Stable
#      Diffusion with its frozen encoders filled into the bubbles; each trace is imported into
#      the history with its plan and compared (`history compare ID plan`);
#   3. --profile of the GPT model (shapes) and the synthetic one (layer times);
#   4. a plan made from the profiled GPT model, executed: measured step against simulated
#      (target within 5 %) and against the same kernels back to back (--baseline, within 3 %);
#   5. where the node's python3 has PyTorch: the kernel timings of the cost model's kernel check
#      (tests/gpu/kernels.py: GEMMs, expert GEMMs, attention; $OUT/kernels.jsonl, the format of
#      bench/fidelity/kernels-h100.jsonl, which `pipestudio-fidelity --kernels` reads), and the
#      grouped expert GEMM curve (tests/gpu/expert_gemm_curve.py: $OUT/expert-gemm-curve.json, which
#      `pipestudio-cli plan --expert-gemm-curve` reads), and a GPT-OSS-120B block part by part
#      under Transformer Engine (tests/gpu/gpt_oss_layer.py: $OUT/gpt-oss-layer.json).
# The CUPTI checks (kernels, memcpy, NCCL kernels, one clock, dropped records) are read from the
# traces by tests/gpu/check-trace.py, here or on the node.
set -uo pipefail
# BACKEND=cpu rehearses the script on a machine without a GPU (--profile then copies the model).
backend=${BACKEND:-cuda-single}
here=$(cd "$(dirname "$0")/../.." && pwd)
out=${OUT:-$(mktemp -d)}
mkdir -p "$out"
stage=${STAGE:-$here/.gpu}
plans=$stage/plans
failures=()
exec > >(tee -a "$out/run.log") 2>&1
exec 3>&1  # the log, for step's own lines while a step's stdout goes to a trace file

step() {  # step NAME TIMEOUT_S COMMAND...: runs, times and logs one step; never exits
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  if [ "$SECONDS" -gt "${BUDGET_S:-400}" ]; then  # leave the lease time to copy the results back
    echo "== $name: skipped, past the script's ${BUDGET_S:-400} s" >&3
    failures+=("$name (skipped: time)")
    return 1
  fi
  echo "== $name" >&3
  timeout --kill-after=10 "$limit" "$@"
  local rc=$?
  echo "-- $name: exit $rc in $((SECONDS - t0)) s" >&3
  [ "$rc" -eq 0 ] || failures+=("$name (exit $rc)")
  return "$rc"
}

echo "== machine"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv || true
nvidia-smi | sed -n 3p || true
nvcc --version 2>/dev/null | tail -2 || /usr/local/cuda/bin/nvcc --version | tail -2 || true
uname -r; nproc
# The cluster of the measured plan: this GPU from the catalogue (its memory bandwidth times the
# optimizer step; every layer's time comes from --profile).
gpu=H100
nvidia-smi -L 2>/dev/null | grep -q H200 && gpu=H200
printf '{"schema": "pipestudio.cluster/1", "name": "this GPU (%s)", "gpu": "%s", "nodes": [{"host": "localhost", "gpus": 1}], "links": {"intra_node": {"bandwidth_gbps": 450, "latency_us": 3}}}\n' \
  "$gpu" "$gpu" >"$out/this-gpu.cluster.json"

# The CUDA libraries: the loader's own, else the toolkit's, else the Python wheels' (nvidia-*).
libdirs=()
for lib in libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libcupti.so.13 libnccl.so.2; do
  ldconfig -p | grep -q "$lib" && continue
  found=$(find /usr/local/cuda/ /usr/local/cuda*/ /opt /usr/lib /usr/local/lib -name "$lib" 2>/dev/null | head -1)
  if [ -n "$found" ]; then libdirs+=("$(dirname "$found")"); else echo "(no $lib on this node)"; fi
done
if [ ${#libdirs[@]} -gt 0 ]; then
  ld=$(printf '%s:' "${libdirs[@]}")
  export LD_LIBRARY_PATH=${ld%:}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"

exec_bin=$stage/bin/pipestudio-exec
tests_bin=$stage/bin/executor_tests
cli=$stage/bin/pipestudio-cli
if ! [ -x "$exec_bin" ] || ldd "$exec_bin" | grep -q 'not found'; then
  echo "(staged pipestudio-exec missing or unloadable: building the executor alone)"
  ldd "$exec_bin" 2>/dev/null | grep 'not found'
  build=${BUILD:-/tmp/pipestudio-executor-only}
  nccl=$(dirname "$(dirname "$(find / -name nccl.h -path '*include*' 2>/dev/null | head -1)")")
  mkdir -p "$here/third_party" && cp -r "$stage/third_party/nlohmann" "$here/third_party/" 2>/dev/null
  NCCL_HOME=$nccl step build 400 bash -c "cmake -S '$here' -B '$build' -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DPIPESTUDIO_EXECUTOR_ONLY=ON -DCMAKE_CUDA_ARCHITECTURES=90 >'$out/build.log' 2>&1 &&
    cmake --build '$build' -j\$(nproc) >>'$out/build.log' 2>&1" || tail -30 "$out/build.log"
  exec_bin=$build/executor/pipestudio-exec
  [ -x "$build/tests/executor/executor_tests" ] && tests_bin=$build/tests/executor/executor_tests
fi
# The CLI's own libraries (.gpu/lib) for the CLI alone: they must not shadow the node's for others.
cli_lib=$stage/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
LD_LIBRARY_PATH=$cli_lib ldd "$cli" | grep 'not found' && { echo "(pipestudio-cli cannot load here: history steps skipped)"; cli=; }
[ -n "$cli" ] && cli="env LD_LIBRARY_PATH=$cli_lib $cli"
export PIPESTUDIO_EXEC=$exec_bin

# The test binary of a full build links the planner's CBC as the CLI does.
step gtests 150 env LD_LIBRARY_PATH="$cli_lib" "$tests_bin" --gtest_filter='Gpu*'

db=$out/history.sqlite
record() {  # record NAME PLAN STREAM: import a trace with its plan, compare the run with the plan
  [ -n "$cli" ] || return 0
  local id
  id=$($cli history import --db "$db" --plan "$2" --name "$1" --json "$3" | sed -n 's/.*"id": *\([0-9]*\).*/\1/p')
  [ -n "$id" ] || { failures+=("$1 import"); return 1; }
  $cli history --db "$db" compare "$id" plan || failures+=("$1 compare")
}

for name in gpt-1f1b gpt-zb-h1 gpt-zb-v sd-filled; do
  step "$backend $name" 60 "$exec_bin" --plan "$plans/$name.plan.json" --backend "$backend" \
    --iterations 5 --warmup 2 --timeout-s 30 ${MAX_OP_MS:+--max-op-ms $MAX_OP_MS} >"$out/$name.stream" 2>"$out/$name.log"
  tail -3 "$out/$name.log"
  record "$name" "$plans/$name.plan.json" "$out/$name.stream"
done

for model in gpt gpt-fp8 synthetic; do
  if [ "$backend" = cpu ]; then  # rehearsal: the plan's own model stands in for the measured one
    python3 -c "import json,sys; json.dump(json.load(open(sys.argv[1]))['model'], open(sys.argv[2], 'w'))" \
      "$plans/$model-1dev.plan.json" "$out/$model.measured.model.json"
    continue
  fi
  step "profile $model" 120 "$exec_bin" --plan "$plans/$model-1dev.plan.json" --backend "$backend" \
    --profile "$out/$model.measured.model.json" 2>"$out/$model.profile.log"
  tail -5 "$out/$model.profile.log"
done

# measured MODEL PRECISION: a 1-device 1F1B plan of 8 microbatches from the profiled model,
# executed; its step against the plan's and against the same kernels back to back.
measured() {
  local model=$1 precision=$2 plan=$out/$1-measured.plan.json
  [ -n "$cli" ] && [ -s "$out/$model.measured.model.json" ] || return 0
  step "plan from the $model profile" 60 $cli plan --model "$out/$model.measured.model.json" \
    --cluster "$out/this-gpu.cluster.json" --schedule 1f1b --devices 1 --microbatches 8 \
    --precision "$precision" -o "$plan" || return 1
  step "execute the $model plan" 60 "$exec_bin" --plan "$plan" --backend "$backend" \
    --iterations 10 --warmup 3 >"$out/$model-measured.stream" 2>"$out/$model-measured.log"
  cat "$out/$model-measured.log"
  record "$model-measured" "$plan" "$out/$model-measured.stream"
  step "baseline $model" 60 "$exec_bin" --plan "$plan" --backend "$backend" --baseline >"$out/$model-baseline.json"
  cat "$out/$model-baseline.json"
  local m b sim
  m=$(sed -n 's/.*mean step \([0-9.e+-]*\) ms.*/\1/p' "$out/$model-measured.log" | tail -1)
  b=$(sed -n 's/.*"baseline_ms": *\([0-9.e+-]*\).*/\1/p' "$out/$model-baseline.json")
  # The executor's step runs from the iteration's reference to the end of its optimizer step: the
  # plan's iteration (makespan + gradient sync + optimizer), not its makespan alone.
  sim=$(python3 -c "import json,sys; m=json.load(open(sys.argv[1]))['metrics']; print(m.get('iteration_ms', m['makespan_ms']))" "$plan")
  echo "== figures $model ($precision)"
  python3 - "${m:-0}" "${sim:-0}" "${b:-0}" <<'PY' || failures+=("targets $model")
import sys
measured, simulated, baseline = map(float, sys.argv[1:])
if min(measured, simulated, baseline) <= 0:
    print("figures missing: measured", measured, "simulated", simulated, "baseline", baseline)
    sys.exit(1)
step_err = (measured - simulated) / simulated * 100
overhead = (measured - baseline) / baseline * 100
print(f"measured step   {measured:10.3f} ms")
print(f"simulated step  {simulated:10.3f} ms   difference {step_err:+.2f} %  (target within 5 %)")
print(f"kernels b2b     {baseline:10.3f} ms   executor overhead {overhead:+.2f} %  (target within 3 %)")
sys.exit(0 if abs(step_err) <= 5 and overhead <= 3 else 1)
PY
}
measured gpt bf16
measured gpt-fp8 fp8

# FP8 against bf16, layer by layer, from the two profiles.
if [ -s "$out/gpt.measured.model.json" ] && [ -s "$out/gpt-fp8.measured.model.json" ]; then
  python3 - "$out/gpt.measured.model.json" "$out/gpt-fp8.measured.model.json" <<'PY'
import json, sys
def layers(path):
    return {l["name"]: l for c in json.load(open(path))["components"] for l in c["layers"]}
bf16, fp8 = layers(sys.argv[1]), layers(sys.argv[2])
print("layer        pass   bf16 ms    fp8 ms  bf16/fp8")
for name in bf16:
    for key, kind in (("forward_ms", "F"), ("backward_input_ms", "B"), ("backward_weight_ms", "W")):
        a, b = bf16[name].get(key), fp8.get(name, {}).get(key)
        if a and b:
            print(f"{name:12} {kind:4} {a:9.4f} {b:9.4f} {a / b:9.2f}")
PY
fi

# One clock: the same plans with CUPTI's own CPU clock and with the steady clock the op ranges
# use (the default), markers kept in the trace and every anchor logged.
for clock in cupti steady; do
  for name in gpt-1dev gpt-1f1b; do
    PIPESTUDIO_EXEC_CUPTI_CLOCK=$clock PIPESTUDIO_EXEC_KEEP_MARKERS=1 step "clock $clock $name" 60 "$exec_bin" \
      --plan "$plans/$name.plan.json" --backend "$backend" --iterations 10 --warmup 2 \
      >"$out/clock-$clock-$name.stream" 2>"$out/clock-$clock-$name.log"
  done
done

if [ "$backend" != cpu ] && python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
  step "kernel timings" 200 env KERNELS_BUDGET_S=150 python3 "$here/tests/gpu/kernels.py" "$out/kernels.jsonl"
  # Issue 43: grouped expert GEMMs against tokens per expert, the curve `plan --expert-gemm-curve` reads.
  step "expert GEMM curve" 150 env CURVE_BUDGET_S=120 python3 "$here/tests/gpu/expert_gemm_curve.py" \
    "$out/expert-gemm-curve.json"
  # Issue 43: a GPT-OSS-120B block part by part under Transformer Engine (sinks, windows, biases).
  step "gpt-oss layer" 180 env GPT_OSS_BUDGET_S=150 python3 "$here/tests/gpu/gpt_oss_layer.py" "$out/gpt-oss-layer.json"
fi

for s in "$out"/*.stream; do
  [ -s "$s" ] && python3 "$here/tests/gpu/check-trace.py" "$s" || failures+=("trace check $(basename "$s")")
done
# What comes back: run.log, history.sqlite and one archive of the traces, logs, models and plans.
(cd "$out" && tar -czf traces.tar.gz --exclude=run.log ./*.stream ./*.log ./*.json 2>/dev/null &&
  find . -maxdepth 1 -type f \( -name '*.stream' -o -name '*.json' -o -name '*.log' \) ! -name run.log -delete)

echo "== summary"
if [ ${#failures[@]} -eq 0 ]; then echo PASS; exit 0; fi
printf 'FAILED: %s\n' "${failures[@]}"
exit 1
