#!/usr/bin/env python3
"""Grouped expert GEMM efficiency on one GPU against tokens per expert (issue 43), for the cost
model's measured curve (GpuSpec::expertGemmCurve; docs/formats.md, "Expert GEMM curve").

For each expert shape of the bundled MoE models (hidden, expert ffn) and each number of tokens per
expert, the six GEMMs of the experts' forward and backward (FC1 and FC2: forward, input gradient,
weight gradient) run as the framework runs them:
  - Transformer Engine's GroupedLinear when transformer_engine imports (what Megatron-Core's
    TEGroupedMLP calls: one cuBLAS GEMM per expert on several streams on Hopper),
  - else one torch.mm per expert on 4 streams (the same launch pattern, TE's num_gemm_streams);
and, as the reference, the one dense GEMM of the same FLOPs (the experts' tokens stacked). Each is
timed in a CUDA graph (GPU time, no host launch cost). The efficiency of a point is the dense time
over the experts' time, summed over the six GEMMs.

Writes $OUT/expert-gemm-curve.json (or the first argument), a `pipestudio.expert_gemm_curve/1`
document: `expert_gemm_curve` (the points `pipestudio-cli plan --expert-gemm-curve FILE` and a
cluster's `gpu.expert_gemm_curve` take) and `measurements` (every GEMM's times). Never asserts
anything. Needs PyTorch with CUDA; fp8 points where torch._scaled_mm runs (Hopper and later).
Time budget: CURVE_BUDGET_S (default 240 s); what is measured by then is written.
"""
import json
import os
import sys
import time
import traceback

import torch

OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.environ.get("OUT", "."), "expert-gemm-curve.json")
BUDGET_S = float(os.environ.get("CURVE_BUDGET_S", "240"))
T0 = time.time()
dev = torch.device("cuda")
FP8 = torch.float8_e4m3fn
one = torch.ones((), device=dev, dtype=torch.float32)
STREAMS = [torch.cuda.Stream() for _ in range(4)]

# The expert shapes of resources/models (hidden, expert ffn; gated: FC1 writes 2 × ffn).
SHAPES = {
    "qwen3-30b-a3b": (2048, 768),
    "qwen3-235b-a22b": (4096, 1536),
    "gpt-oss-120b": (2880, 2880),
    "deepseek-v3": (7168, 2048),
}
TOKENS = (64, 128, 256, 512, 1024, 2048, 4096, 8192)
EXPERTS = int(os.environ.get("CURVE_EXPERTS", "8"))  # local experts per GPU of the grouped GEMM

try:
    import transformer_engine.pytorch as te  # noqa: F401
    HAVE_TE = True
except Exception:  # not installed, or no matching CUDA build
    HAVE_TE = False


def left():
    return BUDGET_S - (time.time() - T0)


def graphed_ms(fn, calls=4):
    """GPU ms per call of fn, captured `calls` times in one CUDA graph and replayed."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(calls):
            fn()
    g.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    reps = 5
    start.record()
    for _ in range(reps):
        g.replay()
    end.record()
    torch.cuda.synchronize()
    del g
    return start.elapsed_time(end) / reps / calls


def mm(a, b, fp8):
    """a (m, k) · b (k, n) in bf16, or fp8 operands with a bf16 output."""
    if fp8:
        return torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    return torch.mm(a, b)


def per_expert(xs, ws, fp8):
    """One GEMM per expert, round-robin on 4 streams (TE GroupedLinear's num_gemm_streams)."""
    def run():
        cur = torch.cuda.current_stream()
        for s in STREAMS:
            s.wait_stream(cur)
        for i, (x, w) in enumerate(zip(xs, ws)):
            with torch.cuda.stream(STREAMS[i % len(STREAMS)]):
                mm(x, w, fp8)
        for s in STREAMS:
            cur.wait_stream(s)
    return run


def operands(rows, inner, cols, fp8, count):
    """`count` pairs of (rows × inner) and (inner × cols) operands; fp8 wants the second column-major."""
    xs, ws = [], []
    for _ in range(count):
        x = torch.randn(rows, inner, device=dev, dtype=torch.bfloat16)
        w = torch.randn(cols, inner, device=dev, dtype=torch.bfloat16)
        if fp8:
            xs.append(x.to(FP8))
            ws.append(w.to(FP8).t())
        else:
            xs.append(x)
            ws.append(w.t())
    return xs, ws


def te_grouped(shape_in, shape_out, tokens, fp8):
    """TE GroupedLinear forward + backward for EXPERTS experts (None where TE cannot run it)."""
    if not HAVE_TE or fp8:
        return None
    import transformer_engine.pytorch as te
    layer = te.GroupedLinear(EXPERTS, shape_in, shape_out, bias=False, params_dtype=torch.bfloat16, device="cuda")
    x = torch.randn(EXPERTS * tokens, shape_in, device=dev, dtype=torch.bfloat16, requires_grad=True)
    splits = [tokens] * EXPERTS
    gy = torch.randn(EXPERTS * tokens, shape_out, device=dev, dtype=torch.bfloat16)

    def run():
        y = layer(x, splits)
        torch.autograd.backward(y, gy)
    try:
        return graphed_ms(run, calls=1)
    except Exception:
        return None


def gemm_kinds(h, f):
    """(name, rows, inner, cols, tokens-in) of the six GEMMs per expert at `t` tokens: tokens are
    the rows of forward and input-gradient GEMMs and the inner dimension of weight gradients."""
    return (
        ("fc1_fprop", "t", h, 2 * f),
        ("fc1_dgrad", "t", 2 * f, h),
        ("fc1_wgrad", h, "t", 2 * f),
        ("fc2_fprop", "t", f, h),
        ("fc2_dgrad", "t", h, f),
        ("fc2_wgrad", f, "t", h),
    )


def measure(name, h, f, t, precision, measurements):
    fp8 = precision == "fp8"
    experts_total = dense_total = 0.0
    for kind, rows, inner, cols in gemm_kinds(h, f):
        r = t if rows == "t" else rows
        k = t if inner == "t" else inner
        xs, ws = operands(r, k, cols, fp8, EXPERTS)
        experts_ms = graphed_ms(per_expert(xs, ws, fp8))
        # The dense GEMM of the same FLOPs: the experts' tokens stacked (rows, or the inner
        # dimension of a weight gradient).
        stacked_r, stacked_k = (EXPERTS * r, k) if rows == "t" else (r, EXPERTS * k)
        (dx,), (dw,) = operands(stacked_r, stacked_k, cols, fp8, 1)
        dense_ms = graphed_ms(lambda: mm(dx, dw, fp8))
        measurements.append(dict(model=name, precision=precision, gemm=kind, experts=EXPERTS, tokens=t, m=r, k=k,
                                 n=cols, experts_ms=experts_ms, dense_ms=dense_ms))
        experts_total += experts_ms
        dense_total += dense_ms
        del xs, ws, dx, dw
    point = dict(precision=precision, tokens=t, hidden=h, expert_ffn=f, efficiency=dense_total / experts_total)
    te_ms = te_grouped(h, 2 * f, t, fp8)
    if te_ms is not None:
        measurements.append(dict(model=name, precision=precision, gemm="te_grouped_linear_fc1", experts=EXPERTS,
                                 tokens=t, ms=te_ms))
    return point


def main():
    props = torch.cuda.get_device_properties(0)
    print(props.name, props.multi_processor_count, torch.__version__, "TE" if HAVE_TE else "no TE", flush=True)
    curve, measurements = [], []
    precisions = ["bf16"]
    if props.major >= 9:
        precisions.append("fp8")
    doc = {"schema": "pipestudio.expert_gemm_curve/1", "gpu": props.name, "expert_gemm_curve": curve,
           "measurements": measurements}

    def write():
        with open(OUT + ".tmp", "w") as out:
            json.dump(doc, out, indent=1)
        os.replace(OUT + ".tmp", OUT)

    for precision in precisions:
        for name, (h, f) in SHAPES.items():
            for t in TOKENS:
                if left() < 10:
                    print(f"budget spent at {name} {precision} {t}", flush=True)
                    write()
                    return
                try:
                    curve.append(measure(name, h, f, t, precision, measurements))
                except Exception:
                    traceback.print_exc()
                    measurements.append(dict(model=name, precision=precision, tokens=t,
                                             error=traceback.format_exc()[-400:]))
                torch.cuda.empty_cache()
            write()
    write()
    print(f"{len(curve)} points in {time.time() - T0:.0f} s -> {OUT}", flush=True)


if __name__ == "__main__":
    main()
