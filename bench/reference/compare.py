#!/usr/bin/env python3
"""PipeStudio's schedules against the Zero Bubble authors' reference schedulers.

The reference is sail-sg/zero-bubble-pipeline-parallelism, files
megatron/core/pipeline_parallel/zerobubble/scheduler/{graph,zb,zbv,v_auto_schedule,zbv_greedy}.py.
They are not part of PipeStudio and are never fetched by this script: copy them yourself into
reference/zero-bubble/ at the repository root (ignored by git), or point --reference (or the
environment variable PIPESTUDIO_ZB_REFERENCE) at a folder holding them. Without them the script
says so and exits 0, so `make bench` and CI never need them.

Every plan, ours and the reference's, is re-timed by the same simulator: the reference's
per-device orders are written as schedule CSV and planned with `pipestudio-cli plan --schedule
custom --csv`, ours with `pipestudio-cli plan --schedule NAME`; makespan, device bubble (span −
busy) and peak activation bytes come from the plans' metrics. Costs are per virtual stage (one
layer each); a transfer takes exactly the reference's cost_comm (output bytes over bandwidth).

    python3 bench/reference/compare.py [--cli build/release/app/pipestudio-cli] [--quick]

Prints one Markdown table (ours against the reference per schedule: wins / ties / losses on the
makespan, worst and mean ratio, peak memory) and, with --details, one line per case.
"""
import argparse
import contextlib
import hashlib
import importlib.util
import io
import json
import os
import random
import subprocess
import sys
import tempfile
import types

REFERENCE_FILES = ["graph", "zb", "zbv", "v_auto_schedule", "zbv_greedy"]
TIE = 1e-6  # relative makespan difference counted as a tie
ACT = 1000  # activation bytes of one virtual stage (one layer) and microbatch


def load_reference(folder):
    """Imports the reference modules from `folder` under their package names; torch and pulp
    (imported by zb.py, used there only for a type annotation and pulp.value) are stubbed."""
    for name in ["torch", "pulp"]:
        stub = types.ModuleType(name)
        stub.Tensor = object
        stub.value = lambda x: x
        sys.modules.setdefault(name, stub)
    package = "megatron.core.pipeline_parallel.zerobubble.scheduler"
    parts = package.split(".")
    for i in range(1, len(parts) + 1):
        name = ".".join(parts[:i])
        if name not in sys.modules:
            module = types.ModuleType(name)
            module.__path__ = []
            sys.modules[name] = module
    modules = {}
    for f in REFERENCE_FILES:
        spec = importlib.util.spec_from_file_location(f"{package}.{f}", os.path.join(folder, f + ".py"))
        module = importlib.util.module_from_spec(spec)
        sys.modules[f"{package}.{f}"] = module
        spec.loader.exec_module(module)
        modules[f] = module
    return modules


# --- inputs for pipestudio-cli -------------------------------------------------------------

def transfer(comm_ms):
    """(output bytes, bandwidth GB/s) whose transfer takes exactly comm_ms (bytes / (GB/s · 1e6))."""
    if comm_ms <= 0:
        return 0, 1.0
    if comm_ms >= 1e-6:
        return int(round(comm_ms * 1e6)), 1.0
    return 1, 1e-6 / comm_ms


def model_doc(costs, wgrad_bytes, comm_ms):
    """costs: per virtual stage (forward, backward_input, backward_weight) in ms; each layer's
    output takes comm_ms to the next device (see transfer)."""
    layers = []
    for i, (f, b, w) in enumerate(costs):
        layers.append({"name": f"l{i}", "kind": "generic", "forward_ms": f, "backward_input_ms": b,
                       "backward_weight_ms": w, "activation_bytes": ACT, "weight_grad_bytes": wgrad_bytes,
                       "parameter_bytes": 0, "output_bytes": transfer(comm_ms)[0]})
    return {"schema": "pipestudio.model/1", "name": "reference-compare", "samples_per_microbatch": 1,
            "layers": layers}


def cluster_doc(devices, comm_ms):
    return {"schema": "pipestudio.cluster/1", "name": "reference-compare",
            "gpu": {"name": "gpu", "peak_tflops": 100, "memory_gib": 80, "efficiency": 0.5},
            "nodes": [{"host": "localhost", "gpus": devices}],
            "links": {"intra_node": {"bandwidth_gbps": transfer(comm_ms)[1], "latency_us": 0}}}


class Cli:
    def __init__(self, exe, workdir):
        self.exe = exe
        self.workdir = workdir
        self.count = 0

    def plan(self, case, schedule, chunks, csv_rows=None, memory_limit=None):
        self.count += 1
        base = os.path.join(self.workdir, f"c{self.count}")
        with open(base + ".model.json", "w") as f:
            json.dump(model_doc(case["costs"], case["wgrad"], case["c"]), f)
        with open(base + ".cluster.json", "w") as f:
            json.dump(cluster_doc(case["p"], case["c"]), f)
        args = [self.exe, "plan", "--model", base + ".model.json", "--cluster", base + ".cluster.json",
                "--schedule", schedule, "--devices", str(case["p"]), "--microbatches", str(case["m"]),
                "--chunks", str(chunks), "--partition", "uniform", "--json"]
        if csv_rows is not None:
            with open(base + ".csv", "w") as f:
                f.write("\n".join(",".join(row) for row in csv_rows) + "\n")
            args += ["--csv", base + ".csv"]
        if memory_limit is not None:
            args += ["--memory-limit", str(memory_limit)]
        run = subprocess.run(args, capture_output=True, text=True)
        if run.returncode != 0:
            return {"error": run.stderr.strip().splitlines()[-1] if run.stderr.strip() else f"exit {run.returncode}"}
        doc = json.loads(run.stdout)
        metrics = doc["metrics"]
        devices = metrics["devices"]
        out = {"makespan": metrics["makespan_ms"],
               "bubble": max(d["span_ms"] - d["busy_ms"] for d in devices),
               "peak": max(d["peak_activation_bytes"] for d in devices) / ACT}
        if "zb_auto" in doc:
            out["published"] = doc["zb_auto"].get("published_heuristic_makespan_ms", 0)
        return out


# --- the reference schedulers, as per-device CSV rows ---------------------------------------

def v_stage(p, chunk, device):
    """Virtual stage id of (chunk, device) on the V placement (chunk 0 down, chunk 1 back up)."""
    return device if chunk == 0 else 2 * p - 1 - device


def kind_letter(kind):
    return {"F": "F", "B": "I", "W": "W"}[kind]


def quiet(fn, *args, **kwargs):
    with contextlib.redirect_stdout(io.StringIO()):
        return fn(*args, **kwargs)


def ref_zbv(ref, case):
    """zbv.py PipelineGraph.create_schedule (ZB-V, two chunks, memory limit 2p chunk activations)."""
    p, m = case["p"], case["m"]
    f, b, w = case["costs"][0]
    mem_b = -(ACT - case["wgrad"])
    graph = ref["zbv"].PipelineGraph(p, m, f, b, w, case["c"], ACT, mem_b, -case["wgrad"])
    config = types.SimpleNamespace(max_chunks=2, n_stages=p)
    nodes = quiet(graph.create_schedule, config)
    return [[f"{v_stage(p, n.chunk, d)}{kind_letter(str(n.type))}{n.microbatch}" for n in row]
            for d, row in enumerate(nodes)]


def ref_v_auto(ref, case, max_mem):
    """v_auto_schedule.py schedule(): the building-block search within `max_mem` chunk activations
    (its memory model: F adds one, W frees one). None when it finds no schedule."""
    p, m = case["p"], case["m"]
    f, b, w = case["costs"][0]
    try:
        nodes = quiet(ref["v_auto_schedule"].schedule, p, m, (f, b, w, case["c"]), max_mem)
    except (TypeError, AssertionError):
        return None
    rows = []
    for d, row in enumerate(nodes):
        ordered = sorted(row, key=lambda n: (n.start_time, n.completion_time))
        rows.append([f"{v_stage(p, int(n.chunk), d)}{kind_letter(n.type)}{n.minibatch}" for n in ordered])
    return rows


def ref_zbv_greedy(ref, case, which):
    """zbv_greedy.py PipelineGraph.create_schedule with mem_config 'half' or 'min'."""
    p, m = case["p"], case["m"]
    f, b, w = case["costs"][0]
    graph = ref["zbv_greedy"].PipelineGraph(p, m, which, f, b, w, case["c"])
    config = types.SimpleNamespace(max_chunks=2, n_stages=p)
    try:
        nodes = quiet(graph.create_schedule, config)
    except (AssertionError, KeyError, IndexError, ValueError):
        return None
    return [[f"{v_stage(p, n.chunk, d)}{kind_letter(str(n.type))}{n.microbatch}" for n in row]
            for d, row in enumerate(nodes)]


def ref_zb(ref, case, limit_units):
    """zb.py initial_solution (the published greedy: manual_order over its 8 policy flags), one
    stage per device, per-stage costs, activation budget `limit_units` microbatches per device."""
    p, m = case["p"], case["m"]
    zb, graph_mod = ref["zb"], ref["graph"]
    costs = case["costs"]
    config = graph_mod.GraphConfig(
        mem_f=[float(ACT)] * p, mem_b=[-float(ACT - case["wgrad"])] * p, mem_w=[-float(case["wgrad"])] * p,
        max_mem=[float(limit_units * ACT)] * p,
        cost_f=[float(c[0]) for c in costs], cost_b=[float(c[1]) for c in costs],
        cost_w=[float(c[2]) for c in costs], cost_comm=float(case["c"]), n_stages=p, n_micro=m, max_chunks=1)
    graph = zb.Graph.build_graph(p, m, config)
    try:
        _, _, complete = quiet(zb.initial_solution, graph, False)
    except (ValueError, TypeError, AssertionError):
        return None
    rows = []
    for d in range(p):
        ops = []
        for kind, letter in enumerate("FIW"):
            for mb in range(m):
                ops.append((complete[graph.get_id(kind, d, mb)], kind, f"{d}{letter}{mb}"))
        rows.append([name for _, _, name in sorted(ops)])
    return rows


# --- cases ----------------------------------------------------------------------------------

def uniform_case(p, m, f, b, w, c, wgrad, chunks):
    return {"p": p, "m": m, "c": c, "wgrad": wgrad, "costs": [(f, b, w)] * (p * chunks)}


def zbv_cases(rng, quick):
    cases = [uniform_case(8, 32, 100, 100, 100, 0, ACT, 2),        # the lower-bound case
             uniform_case(8, 32, 100, 100, 100, 1e-12, ACT, 2),    # a negligible transfer
             uniform_case(4, 16, 100, 100, 100, 0, ACT // 3, 2)]
    for _ in range(8 if quick else 36):
        p = rng.choice([4, 6, 8, 16])
        m = p * rng.choice([2, 3, 4])
        f, b, w = (rng.randint(50, 150) for _ in range(3))
        c = rng.choice([0, 0, rng.randint(1, 20)])
        cases.append(uniform_case(p, m, f, b, w, c, rng.choice([ACT, ACT // 3]), 2))
    return cases


def vshape_cases(rng, quick):
    cases = [uniform_case(p, 4 * p, 100, 100, 100, 0, ACT, 2) for p in ([4, 8] if quick else [4, 6, 8, 12])]
    for _ in range(4 if quick else 20):
        p = rng.choice([4, 6, 8])
        m = p * rng.choice([2, 3, 4])
        f, b, w = (rng.randint(50, 150) for _ in range(3))
        c = rng.choice([0, rng.randint(1, 10)])
        cases.append(uniform_case(p, m, f, b, w, c, ACT, 2))
    return cases


def zb_cases(rng, quick):
    cases = []
    for _ in range(8 if quick else 30):
        p = rng.choice([4, 8, 16])
        m = p * rng.choice([2, 3, 4])
        if rng.random() < 0.5:
            f, b, w = (rng.randint(50, 150) for _ in range(3))
            costs = [(f, b, w)] * p
        else:
            costs = [tuple(rng.randint(50, 150) for _ in range(3)) for _ in range(p)]
        c = rng.choice([0, rng.randint(1, 20)])
        case = {"p": p, "m": m, "c": c, "wgrad": rng.choice([ACT, ACT // 3]), "costs": costs,
                "limit": rng.choice([p // 2, p, (3 * p) // 2, 2 * p])}
        cases.append(case)
    return cases


# --- comparison -----------------------------------------------------------------------------

class Tally:
    def __init__(self, name, reference):
        self.name, self.reference = name, reference
        self.wins = self.ties = self.losses = self.ref_failed = self.ours_failed = self.over = 0
        self.ratios = []
        self.lines = []

    def add(self, label, ours, ref, limit=None):
        if ref is None or "error" in ref:
            self.ref_failed += 1
            self.lines.append(f"{label}: reference failed ({ref.get('error') if ref else 'no schedule'})")
            return
        if "error" in ours:
            self.ours_failed += 1
            self.lines.append(f"{label}: ours failed ({ours['error']})")
            return
        ratio = ours["makespan"] / ref["makespan"]
        self.ratios.append(ratio)
        if ratio < 1 - TIE:
            self.wins += 1
        elif ratio > 1 + TIE:
            self.losses += 1
        else:
            self.ties += 1
        if limit is not None and ours["peak"] > limit + 1e-9:
            self.over += 1
        self.lines.append(f"{label}: ours {ours['makespan']:.3f} (bubble {ours['bubble']:.3f}, peak {ours['peak']:g}) "
                          f"ref {ref['makespan']:.3f} (bubble {ref['bubble']:.3f}, peak {ref['peak']:g}) "
                          f"ratio {ratio:.5f}" + (f" limit {limit:g}" if limit is not None else ""))

    def row(self):
        n = len(self.ratios)
        worst = max(self.ratios) - 1 if n else 0
        best = min(self.ratios) - 1 if n else 0
        mean = sum(self.ratios) / n - 1 if n else 0
        failed = f"{self.ours_failed} / {self.ref_failed}"
        return (f"| {self.name} | {self.reference} | {n} | {self.wins} / {self.ties} / {self.losses} | "
                f"{100 * worst:+.2f}% | {100 * best:+.2f}% | {100 * mean:+.2f}% | {self.over} | {failed} |")


def cache_key(*parts):
    return hashlib.sha1(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def main():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reference", default=os.environ.get("PIPESTUDIO_ZB_REFERENCE",
                                                          os.path.join(root, "reference", "zero-bubble")))
    ap.add_argument("--cli", default=os.path.join(root, "build", "release", "app", "pipestudio-cli"))
    ap.add_argument("--quick", action="store_true", help="fewer cases")
    ap.add_argument("--details", action="store_true", help="one line per case")
    ap.add_argument("--only", default="", help="comma-separated: zb-v,v-half,v-min,zb-auto")
    ap.add_argument("--seed", type=int, default=2024)
    args = ap.parse_args()
    missing = [f for f in REFERENCE_FILES if not os.path.isfile(os.path.join(args.reference, f + ".py"))]
    if missing:
        print(f"reference comparison skipped: {args.reference} lacks {', '.join(f + '.py' for f in missing)} "
              "(copy them from sail-sg/zero-bubble-pipeline-parallelism, "
              "megatron/core/pipeline_parallel/zerobubble/scheduler/)")
        return 0
    if not os.access(args.cli, os.X_OK):
        print(f"reference comparison skipped: {args.cli} is not built")
        return 0
    ref = load_reference(args.reference)
    only = set(filter(None, args.only.split(",")))
    cache_path = os.path.join(os.path.dirname(args.cli), ".reference-cache.json")
    try:
        with open(cache_path) as f:
            cache = json.load(f)
    except (OSError, ValueError):
        cache = {}

    def reference_rows(key, fn):
        if key not in cache:
            cache[key] = fn()
        return cache[key]

    tallies = []
    with tempfile.TemporaryDirectory() as work:
        cli = Cli(args.cli, work)

        def label(case):
            return f"p={case['p']} m={case['m']} F/B/W={case['costs'][0]} c={case['c']} wgrad={case['wgrad']}"

        if not only or "zb-v" in only:
            t = Tally("zb-v", "zbv.py")
            for case in zbv_cases(random.Random(args.seed), args.quick):
                rows = reference_rows(cache_key("zbv", case), lambda: ref_zbv(ref, case))
                t.add(label(case), cli.plan(case, "zb-v", 2), cli.plan(case, "custom", 2, rows), limit=2 * case["p"])
            tallies.append(t)
        for name, which in (("v-half", "half"), ("v-min", "min")):
            if only and name not in only:
                continue
            auto = Tally(name, "v_auto_schedule.py")
            greedy = Tally(name, f"zbv_greedy.py ({which})")
            for case in vshape_cases(random.Random(args.seed + 1), args.quick):
                ours = cli.plan(case, name, 2)
                peak = int(round(ours.get("peak", 0)))
                rows = reference_rows(cache_key("v_auto", case, peak), lambda: ref_v_auto(ref, case, peak))
                auto.add(label(case) + f" mem={peak}", ours, cli.plan(case, "custom", 2, rows) if rows else None)
                rows = reference_rows(cache_key("zbv_greedy", case, which), lambda: ref_zbv_greedy(ref, case, which))
                greedy.add(label(case), ours, cli.plan(case, "custom", 2, rows) if rows else None)
            tallies += [auto, greedy]
        if not only or "zb-auto" in only:
            t = Tally("zb-auto", "zb.py (greedy)")
            # Our port of zb.py's greedy alone (zb-auto's "published heuristic" figure): it should
            # tie the reference everywhere.
            port = Tally("zb-auto's published-heuristic figure", "zb.py (greedy)")
            for case in zb_cases(random.Random(args.seed + 2), args.quick):
                limit_bytes = case["limit"] * ACT
                rows = reference_rows(cache_key("zb", case), lambda: ref_zb(ref, case, case["limit"]))
                ours = cli.plan(case, "zb-auto", 1, memory_limit=limit_bytes)
                theirs = cli.plan(case, "custom", 1, rows) if rows else None
                t.add(label(case) + f" limit={case['limit']}", ours, theirs, limit=case["limit"])
                if "published" in ours:
                    port.add(label(case), dict(ours, makespan=ours["published"]), theirs)
            tallies += [t, port]
    with open(cache_path, "w") as f:
        json.dump(cache, f)

    commit = "39f2c186a27580b7051eb51e0f651e1efd0a8170"
    print(f"Reference: sail-sg/zero-bubble-pipeline-parallelism @ {commit[:12]} (files in {args.reference})")
    print()
    print("| schedule | reference | cases | wins / ties / losses | worst | best | mean | over limit | failed (ours / ref) |")
    print("|---|---|---:|---|---:|---:|---:|---:|---|")
    for t in tallies:
        print(t.row())
    if args.details:
        for t in tallies:
            print(f"\n{t.name} vs {t.reference}:")
            for line in t.lines:
                print("  " + line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
