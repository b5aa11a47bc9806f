#!/usr/bin/env python3
"""Kernel timings on one GPU for the cost model's kernel terms (issue 26): dense GEMMs in bf16 and
fp8 over the shapes of today's MoE and dense recipes, the expert GEMMs as Transformer Engine's
GroupedLinear runs them on Hopper (one cuBLAS GEMM per local expert over several streams) and as
one grouped GEMM, fused attention against sequence length, and the memory-bound kernels of a MoE
layer. Writes JSON lines to $OUT/kernels.jsonl (or the first argument); never asserts anything:
docs/fidelity.md compares these with the cost model. Needs PyTorch with CUDA."""
import json, os, sys, time, traceback

import torch

out_path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.environ.get("OUT", "."), "kernels.jsonl")
out = open(out_path, "w")
dev = torch.device("cuda")
T0 = time.time()
BUDGET_S = float(os.environ.get("KERNELS_BUDGET_S", "300"))


def emit(**rec):
    out.write(json.dumps(rec) + "\n")
    out.flush()


def left():
    return BUDGET_S - (time.time() - T0)


def timed(fn, target_ms=15.0):
    """GPU ms per call of fn (CUDA events around a loop), and host ms per call."""
    fn()
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    fn()
    e.record()
    torch.cuda.synchronize()
    one = max(s.elapsed_time(e), 1e-3)
    reps = int(max(3, min(50, target_ms / one)))
    torch.cuda.synchronize()
    h0 = time.perf_counter()
    s.record()
    for _ in range(reps):
        fn()
    e.record()
    h1 = time.perf_counter()
    torch.cuda.synchronize()
    return s.elapsed_time(e) / reps, (h1 - h0) * 1000.0 / reps


def graphed(fn, calls=1):
    """GPU ms per call of fn, `calls` of them captured in one CUDA graph (no host launch cost)."""
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
    gpu, _ = timed(g.replay)
    del g
    return gpu / calls


def section(name, body):
    if left() <= 0:
        print(f"[{time.time()-T0:6.1f}s] skip {name}: budget spent", flush=True)
        return
    print(f"[{time.time()-T0:6.1f}s] {name}", flush=True)
    try:
        body()
    except Exception:
        traceback.print_exc()
        emit(section=name, error=traceback.format_exc()[-800:])


props = torch.cuda.get_device_properties(0)
emit(section="device", name=props.name, sms=props.multi_processor_count, memory_gib=props.total_memory / 2**30,
     torch=torch.__version__, cuda=torch.version.cuda, cudnn=torch.backends.cudnn.version())
print(props.name, props.multi_processor_count, torch.__version__, flush=True)

FP8 = torch.float8_e4m3fn
one = torch.ones((), device=dev, dtype=torch.float32)


def mm_bf16(a, w):  # a (m,k), w (n,k): y = a wᵀ as a Linear does
    return lambda: torch.mm(a, w.t())


def mm_fp8(a8, w8):
    return lambda: torch._scaled_mm(a8, w8.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)


# 1. Dense GEMMs: the forward shapes (m tokens × k in → n out) of the recipes' layers, and a grid.
def dense():
    ms = [512, 1024, 2048, 4096, 8192, 16384]
    ns = [768, 1536, 2880, 4096, 5760, 8192, 16384, 28672]
    ks = [768, 1536, 2048, 2880, 4096, 7168, 8192]
    for k in ks:
        for n in ns:
            w = torch.randn(n, k, device=dev, dtype=torch.bfloat16)
            w8 = w.to(FP8)
            for m in ms:
                if left() < 60:
                    return
                a = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
                a8 = a.to(FP8)
                flops = 2.0 * m * n * k
                for prec, fn in (("bf16", mm_bf16(a, w)), ("fp8", mm_fp8(a8, w8))):
                    try:
                        gpu = graphed(fn, 10)
                        emit(section="gemm", prec=prec, m=m, n=n, k=k, ms=gpu, tflops=flops / gpu / 1e9)
                    except Exception as ex:
                        emit(section="gemm", prec=prec, m=m, n=n, k=k, error=str(ex)[:200])
            del w, w8


# 2. Expert GEMMs: G local experts of m routed tokens each, FC1 (h → n1) and FC2 (f → h).
EXPERTS = {  # name: (hidden, expert ffn × (2 if gated))
    "qwen3-30b-a3b": (2048, 768),
    "qwen3-235b-a22b": (4096, 1536),
    "gpt-oss-120b": (2880, 2880),
    "deepseek-v3": (7168, 2048),
}
streams = [torch.cuda.Stream() for _ in range(4)]


def loop(xs, ws, nstreams, fp8=False):
    def run():
        cur = torch.cuda.current_stream()
        if nstreams == 1:
            for x, w in zip(xs, ws):
                if fp8:
                    torch._scaled_mm(x, w.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
                else:
                    torch.mm(x, w.t())
            return
        for s in streams[:nstreams]:
            s.wait_stream(cur)
        for i, (x, w) in enumerate(zip(xs, ws)):
            with torch.cuda.stream(streams[i % nstreams]):
                if fp8:
                    torch._scaled_mm(x, w.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
                else:
                    torch.mm(x, w.t())
        for s in streams[:nstreams]:
            cur.wait_stream(s)

    return run


def experts():
    for name, (h, f) in EXPERTS.items():
        for which, (n, k) in (("fc1", (2 * f, h)), ("fc2", (h, f))):
            for groups in (4, 8, 16):
                for m in (256, 512, 1024, 2048, 4096):
                    if left() < 45:
                        return
                    xs = [torch.randn(m, k, device=dev, dtype=torch.bfloat16) for _ in range(groups)]
                    ws = [torch.randn(n, k, device=dev, dtype=torch.bfloat16) for _ in range(groups)]
                    flops = 2.0 * groups * m * n * k
                    rec = dict(section="experts", model=name, gemm=which, groups=groups, m=m, n=n, k=k)
                    for mode, fn in (("loop1", loop(xs, ws, 1)), ("loop4", loop(xs, ws, 4))):
                        gpu, host = timed(fn)
                        rec[mode + "_ms"] = gpu
                        rec[mode + "_host_ms"] = host
                        try:
                            rec[mode + "_graph_ms"] = graphed(fn)
                        except Exception as ex:
                            rec[mode + "_graph_error"] = str(ex)[:200]
                    try:
                        x8 = [x.to(FP8) for x in xs]
                        w8 = [w.to(FP8) for w in ws]
                        gpu, host = timed(loop(x8, w8, 4, fp8=True))
                        rec["fp8_loop4_ms"], rec["fp8_loop4_host_ms"] = gpu, host
                        rec["fp8_loop4_graph_ms"] = graphed(loop(x8, w8, 4, fp8=True))
                    except Exception as ex:
                        rec["fp8_error"] = str(ex)[:200]
                    try:
                        a = torch.cat(xs)
                        b = torch.stack(ws)  # (G, n, k): bᵀ per group is column-major (k, n)
                        offs = torch.arange(1, groups + 1, device=dev, dtype=torch.int32) * m
                        fn = lambda: torch._grouped_mm(a, b.transpose(-2, -1), offs=offs, out_dtype=torch.bfloat16)
                        gpu, host = timed(fn)
                        rec["grouped_ms"], rec["grouped_host_ms"] = gpu, host
                    except Exception as ex:
                        rec["grouped_error"] = str(ex)[:200]
                    # the same FLOPs as one dense GEMM
                    big = torch.randn(groups * m, k, device=dev, dtype=torch.bfloat16)
                    rec["dense_same_ms"], _ = timed(mm_bf16(big, ws[0]))
                    rec["flops"] = flops
                    emit(**rec)
                    del xs, ws, big


# 3. Attention: SDPA's cuDNN and flash backends, bf16, causal and not, fwd and fwd+bwd.
def attention():
    from torch.nn.attention import sdpa_kernel, SDPBackend
    for backend in (SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION):
        for d in (128, 64):
            for seq in (1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072):
                for causal in (True, False):
                    if left() < 25:
                        return
                    heads = 16
                    batch = max(1, 16384 // seq)
                    q = torch.randn(batch, heads, seq, d, device=dev, dtype=torch.bfloat16, requires_grad=True)
                    kk = torch.randn(batch, heads, seq, d, device=dev, dtype=torch.bfloat16, requires_grad=True)
                    v = torch.randn(batch, heads, seq, d, device=dev, dtype=torch.bfloat16, requires_grad=True)
                    rec = dict(section="attention", backend=str(backend).split(".")[-1], d=d, seq=seq, batch=batch,
                               heads=heads, causal=causal)
                    try:
                        with sdpa_kernel([backend]):
                            o = torch.nn.functional.scaled_dot_product_attention(q, kk, v, is_causal=causal)
                            do = torch.randn_like(o)
                            fwd, _ = timed(lambda: torch.nn.functional.scaled_dot_product_attention(q, kk, v, is_causal=causal))

                            def fb():
                                o = torch.nn.functional.scaled_dot_product_attention(q, kk, v, is_causal=causal)
                                torch.autograd.grad(o, (q, kk, v), do)

                            both, _ = timed(fb)
                        rec.update(fwd_ms=fwd, bwd_ms=both - fwd)
                    except Exception as ex:
                        rec["error"] = str(ex)[:200]
                    emit(**rec)
                    del q, kk, v


# 4. Memory-bound kernels: copy, token permutation (gather of rows), SwiGLU, top-k routing.
def memory():
    n = 1 << 28
    a = torch.empty(n, device=dev, dtype=torch.bfloat16)
    b = torch.empty_like(a)
    gpu, _ = timed(lambda: b.copy_(a))
    emit(section="memory", op="copy", bytes=4 * n, ms=gpu, gbps=4 * n / gpu / 1e6)
    for h in (2048, 4096, 7168):
        rows = 32768
        x = torch.randn(rows // 8, h, device=dev, dtype=torch.bfloat16)
        idx = torch.randint(0, rows // 8, (rows,), device=dev)
        gpu, _ = timed(lambda: x.index_select(0, idx))
        emit(section="memory", op="permute", h=h, rows=rows, ms=gpu, gbps=4 * rows * h / gpu / 1e6)
        y = torch.randn(rows, 2 * 768, device=dev, dtype=torch.bfloat16)
        g, u = y.chunk(2, dim=1)
        gpu, _ = timed(lambda: torch.nn.functional.silu(g) * u)
        emit(section="memory", op="swiglu", f=768, rows=rows, ms=gpu)
    for experts, tokens in ((128, 4096), (256, 2048)):
        logits = torch.randn(tokens, experts, device=dev, dtype=torch.float32)
        gpu, host = timed(lambda: torch.topk(torch.softmax(logits, -1), 8, dim=-1))
        emit(section="memory", op="router_topk", experts=experts, tokens=tokens, ms=gpu, host_ms=host)
    counts = torch.zeros(128, device=dev, dtype=torch.int64)
    t0 = time.perf_counter()
    for _ in range(200):
        counts.add_(1)
        counts.tolist()
    emit(section="host", op="d2h_sync", us=(time.perf_counter() - t0) / 200 * 1e6)
    z = torch.zeros(16, device=dev)
    t0 = time.perf_counter()
    for _ in range(2000):
        z.add_(1)
    torch.cuda.synchronize()
    emit(section="host", op="launch", us=(time.perf_counter() - t0) / 2000 * 1e6)




# 5. One transformer layer of today's MoE models as one expert-parallel rank runs it (issue 26):
# RMSNorm, QKV, per-head q/k norms, cuDNN attention, output projection; router, top-k,
# permutation, grouped expert GEMMs (torch._grouped_mm), SwiGLU, un-permutation. Forward plus
# backward (eager: the host keeps ahead), whole and by half: what the kernels alone cost next to
# the cost model's layer, without a framework's host work or the all-to-alls.
LAYERS = {  # name: (hidden, heads, kv heads, head dim, expert ffn, local experts, top-k, tokens)
    "qwen3-30b-a3b": (2048, 32, 4, 128, 768, 8, 8, 4096),    # EP 16: 8 experts of 4,096 rows
    "gpt-oss-120b": (2880, 64, 8, 64, 2880, 16, 4, 4096),    # EP 8: 16 experts of ~1,024 rows
}


def layers():
    import torch.nn.functional as F
    from torch.nn.attention import sdpa_kernel, SDPBackend
    bf = torch.bfloat16
    for name, (h, heads, kv, hd, f, E, k, s) in LAYERS.items():
        if left() < 30:
            return
        P = lambda *shape, scale=0.02: (torch.randn(*shape, device=dev, dtype=bf) * scale).requires_grad_()
        ln1, ln2, qn, kn = (torch.ones(n, device=dev, dtype=bf, requires_grad=True) for n in (h, h, hd, hd))
        wqkv, wo, wr = P((heads + 2 * kv) * hd, h), P(h, heads * hd), P(E, h)
        w1, w2 = P(E, 2 * f, h), P(E, h, f)
        params = [ln1, ln2, qn, kn, wqkv, wo, wr, w1, w2]
        x = (torch.randn(s, h, device=dev, dtype=bf)).requires_grad_()

        def attention_half(x):
            y = F.rms_norm(x, (h,), ln1)
            qkv = y @ wqkv.t()
            q, kk, v = qkv.split([heads * hd, kv * hd, kv * hd], dim=1)
            q = F.rms_norm(q.view(s, heads, hd), (hd,), qn)
            kk = F.rms_norm(kk.view(s, kv, hd), (hd,), kn)
            v = v.view(s, kv, hd)
            rep = heads // kv
            q = q.transpose(0, 1).unsqueeze(0)
            kk = kk.repeat_interleave(rep, dim=1).transpose(0, 1).unsqueeze(0)
            v = v.repeat_interleave(rep, dim=1).transpose(0, 1).unsqueeze(0)
            with sdpa_kernel([SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION]):
                o = F.scaled_dot_product_attention(q, kk, v, is_causal=True)
            o = o.squeeze(0).transpose(0, 1).reshape(s, heads * hd)
            return x + o @ wo.t()

        def moe_half(x):
            z = F.rms_norm(x, (h,), ln2)
            probs = torch.softmax((z @ wr.t()).float(), dim=-1)
            topv, topi = torch.topk(probs, k, dim=-1)
            flat = topi.reshape(-1)
            order = torch.argsort(flat, stable=True)
            counts = torch.zeros(E, device=dev, dtype=torch.int32).scatter_add_(
                0, flat, torch.ones_like(flat, dtype=torch.int32))
            offs = torch.cumsum(counts, 0, dtype=torch.int32)
            token = order // k
            rows = z.index_select(0, token)
            mid = torch._grouped_mm(rows, w1.transpose(-2, -1), offs=offs)
            act = F.silu(mid[:, :f]) * mid[:, f:]
            out = torch._grouped_mm(act, w2.transpose(-2, -1), offs=offs)
            out = out * topv.reshape(-1)[order].unsqueeze(1).to(bf)
            return x + torch.zeros_like(x).index_add_(0, token, out)

        for part, fn in (("layer", lambda x: moe_half(attention_half(x))), ("attention", attention_half),
                         ("moe", moe_half)):
            rec = dict(section="layer", model=name, part=part, hidden=h, heads=heads, kv_heads=kv, head_dim=hd,
                       expert_ffn=f, local_experts=E, top_k=k, tokens=s)
            try:
                y = fn(x)
                gy = torch.randn_like(y)
                fwd = lambda: fn(x)
                fb = lambda: torch.autograd.grad(fn(x), [x] + params, gy, allow_unused=True)
                rec["fwd_ms"], rec["fwd_host_ms"] = timed(fwd)
                # Eager only: capturing autograd in a CUDA graph failed here and left the context
                # unusable; the host runs ahead of these kernels anyway (host_ms < ms).
                rec["fwd_bwd_ms"], rec["fwd_bwd_host_ms"] = timed(fb)
                if part == "moe":  # where the MoE half's time goes, kernel by kernel
                    from torch.profiler import profile, ProfilerActivity
                    fb()
                    torch.cuda.synchronize()
                    with profile(activities=[ProfilerActivity.CUDA]) as prof:
                        for _ in range(3):
                            fb()
                        torch.cuda.synchronize()
                    kernels = sorted(((e.key, e.device_time_total / 3000.0, e.count // 3)
                                      for e in prof.key_averages() if e.device_time_total > 0),
                                     key=lambda t: -t[1])
                    rec["kernels"] = [[name[:90], round(ms, 4), n] for name, ms, n in kernels[:25]]
            except Exception as ex:
                rec["error"] = str(ex)[:300]
            emit(**rec)


SECTIONS = os.environ.get("SECTIONS", "memory,experts,attention,dense,layers").split(",")
for name, body in (("memory", memory), ("experts", experts), ("attention", attention), ("dense", dense),
                   ("layers", layers)):
    if name in SECTIONS:
        section(name, body)
print(f"done in {time.time()-T0:.1f}s", flush=True)
