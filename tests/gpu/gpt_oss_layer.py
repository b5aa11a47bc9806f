#!/usr/bin/env python3
"""Where a GPT-OSS-120B block's GPU time goes, part by part, as Transformer Engine runs it (issue 43).

GPT-OSS's block differs from the other bundled MoE models in ways the cost model does not time
(docs/fidelity.md, "GPT-OSS as it is"): attention with learnable sinks (TE softmax_type
"learnable", which only cuDNN's fused attention and the unfused path support), sliding windows of
128 on every other layer (window_size (127, 0)), 64 heads of 64 over a 2,880 hidden, biases on every
linear layer, and a clamped gated activation (quick-GELU with a +1 offset on the linear half,
clamped at 7). The published runs are 40-70 % slower than the model on every GPU, so this script
times each part on its own, forward and backward, in bf16:
  - attention: TE DotProductAttention, causal, GQA 64/8 heads of 64, 4,096 tokens, micro-batch 1
    and 4; vanilla softmax against learnable sinks, full against the 128-token window; and which
    backend TE picked (NVTE_DEBUG logging is not parsed: the environment is recorded);
  - the expert GEMMs: TE GroupedLinear for 16 (H100, EP 8) and 2 (GB200, EP 64) local experts at
    the recipes' tokens per expert, with and without bias;
  - the activation: Megatron-Core's weighted_bias_quick_geglu_impl where megatron.core imports,
    else the same arithmetic in PyTorch.
Without Transformer Engine only the PyTorch references run (SDPA cannot take sinks). Writes
$OUT/gpt-oss-layer.json (or the first argument); asserts nothing.
"""
import json
import os
import sys
import time
import traceback

import torch

OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.environ.get("OUT", "."), "gpt-oss-layer.json")
BUDGET_S = float(os.environ.get("GPT_OSS_BUDGET_S", "150"))
T0 = time.time()
dev = torch.device("cuda")
bf = torch.bfloat16
H, HEADS, KV, D, FFN, SEQ, WINDOW = 2880, 64, 8, 64, 2880, 4096, 128
results = []


def left():
    return BUDGET_S - (time.time() - T0)


def timed(fn, reps=10):
    """GPU ms per call (CUDA events; eager, as Megatron runs these modules without graphs)."""
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / reps


def record(**rec):
    results.append(rec)
    print(rec, flush=True)


def attention_te(batch):
    import transformer_engine.pytorch as te
    for softmax in ("vanilla", "learnable"):
        for window in (None, (WINDOW - 1, 0)):
            if left() < 10:
                return
            rec = dict(part="attention", impl="te", batch=batch, softmax=softmax, window=WINDOW if window else 0)
            try:
                kwargs = dict(num_gqa_groups=KV, attn_mask_type="causal", qkv_format="sbhd")
                if window:
                    kwargs["window_size"] = window
                if softmax != "vanilla":
                    kwargs["softmax_type"] = softmax
                attn = te.DotProductAttention(HEADS, D, **kwargs).to(dev)
                q = torch.randn(SEQ, batch, HEADS, D, device=dev, dtype=bf, requires_grad=True)
                k = torch.randn(SEQ, batch, KV, D, device=dev, dtype=bf, requires_grad=True)
                v = torch.randn(SEQ, batch, KV, D, device=dev, dtype=bf, requires_grad=True)
                o = attn(q, k, v)
                go = torch.randn_like(o)
                rec["fwd_ms"] = timed(lambda: attn(q, k, v))
                rec["fwd_bwd_ms"] = timed(lambda: torch.autograd.backward(attn(q, k, v), go))
            except Exception as ex:
                rec["error"] = str(ex)[-300:]
            record(**rec)


def attention_sdpa(batch):
    import torch.nn.functional as F
    q = torch.randn(batch, HEADS, SEQ, D, device=dev, dtype=bf, requires_grad=True)
    k = torch.randn(batch, HEADS, SEQ, D, device=dev, dtype=bf, requires_grad=True)
    v = torch.randn(batch, HEADS, SEQ, D, device=dev, dtype=bf, requires_grad=True)
    o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    go = torch.randn_like(o)
    record(part="attention", impl="sdpa", batch=batch, softmax="vanilla", window=0,
           fwd_ms=timed(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)),
           fwd_bwd_ms=timed(lambda: torch.autograd.backward(F.scaled_dot_product_attention(q, k, v, is_causal=True),
                                                            go)))


def experts_te(local, tokens):
    import transformer_engine.pytorch as te
    for bias in (False, True):
        if left() < 10:
            return
        rec = dict(part="experts_fc1", impl="te", local_experts=local, tokens_per_expert=tokens, bias=bias)
        try:
            fc1 = te.GroupedLinear(local, H, 2 * FFN, bias=bias, params_dtype=bf, device="cuda")
            x = torch.randn(local * tokens, H, device=dev, dtype=bf, requires_grad=True)
            splits = [tokens] * local
            y = fc1(x, splits)
            gy = torch.randn_like(y)
            rec["fwd_ms"] = timed(lambda: fc1(x, splits))
            rec["fwd_bwd_ms"] = timed(lambda: torch.autograd.backward(fc1(x, splits), gy))
        except Exception as ex:
            rec["error"] = str(ex)[-300:]
        record(**rec)


def activation(rows):
    y = torch.randn(rows, 2 * FFN, device=dev, dtype=bf, requires_grad=True)
    bias = torch.randn(2 * FFN, device=dev, dtype=bf, requires_grad=True)
    probs = torch.rand(rows, 1, device=dev, dtype=torch.float32)
    impl = "torch"
    try:
        from megatron.core.fusions.fused_bias_geglu import weighted_bias_quick_geglu_impl as fused
        fn = lambda: fused(y, bias, probs, False, linear_offset=1.0, clamp_value=7.0)  # noqa: E731
        impl = "megatron"
    except Exception:
        def fn():
            z = y + bias
            g, lin = z.chunk(2, dim=-1)
            g = g.clamp(max=7.0)
            lin = lin.clamp(-7.0, 7.0)
            return (g * torch.sigmoid(1.702 * g) * (lin + 1.0) * probs).to(bf)
    out = fn()
    go = torch.randn_like(out)
    record(part="activation", impl=impl, rows=rows, fwd_ms=timed(fn),
           fwd_bwd_ms=timed(lambda: torch.autograd.backward(fn(), go)))


def main():
    props = torch.cuda.get_device_properties(0)
    env = {k: v for k, v in os.environ.items() if k.startswith("NVTE_")}
    try:
        import transformer_engine
        te_version = transformer_engine.__version__
    except Exception:
        te_version = None
    for batch in (1, 4):
        try:
            if te_version:
                attention_te(batch)
            attention_sdpa(batch)
        except Exception:
            record(part="attention", batch=batch, error=traceback.format_exc()[-400:])
    # Tokens per expert as the recipes route them: H100 EP 8 at MBS 1 (16 experts of 1,024 rows),
    # GB200 EP 64 at MBS 4 (2 experts of 32,768 rows, in chunks of 8,192 here to bound memory).
    for local, tokens in ((16, 1024), (2, 8192)):
        try:
            if te_version:
                experts_te(local, tokens)
        except Exception:
            record(part="experts_fc1", error=traceback.format_exc()[-400:])
    for rows in (16384, 65536):
        try:
            activation(rows)
        except Exception:
            record(part="activation", rows=rows, error=traceback.format_exc()[-400:])
    doc = dict(gpu=props.name, torch=torch.__version__, transformer_engine=te_version, cudnn=torch.backends.cudnn.version(),
               nvte_env=env, results=results)
    with open(OUT + ".tmp", "w") as out:
        json.dump(doc, out, indent=1)
    os.replace(OUT + ".tmp", OUT)
    print(f"{len(results)} timings in {time.time() - T0:.0f} s -> {OUT}", flush=True)


if __name__ == "__main__":
    main()
