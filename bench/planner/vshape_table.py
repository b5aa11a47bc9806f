#!/usr/bin/env python3
"""README table: peak activation memory and device bubble of the V-shaped schedules as a share of
1F1B's on the same layers (free communication, m = 4p), equal and unequal pass times.

    python3 bench/planner/vshape_table.py [build/release/app/pipestudio-cli]
"""
import json
import os
import subprocess
import sys
import tempfile


def plan(cli, work, layers, p, m, schedule, chunks, f, b, w):
    model = {"schema": "pipestudio.model/1", "name": "vshape", "samples_per_microbatch": 1,
             "layers": [{"name": f"l{i}", "kind": "generic", "forward_ms": f, "backward_input_ms": b,
                         "backward_weight_ms": w, "activation_bytes": 1000, "weight_grad_bytes": 400,
                         "parameter_bytes": 0, "output_bytes": 0} for i in range(layers)]}
    cluster = {"schema": "pipestudio.cluster/1", "name": "free",
               "gpu": {"name": "gpu", "peak_tflops": 100, "memory_gib": 80, "efficiency": 0.5},
               "nodes": [{"host": "localhost", "gpus": p}],
               "links": {"intra_node": {"bandwidth_gbps": 100, "latency_us": 0}}}
    mp, cp = os.path.join(work, "m.json"), os.path.join(work, "c.json")
    json.dump(model, open(mp, "w"))
    json.dump(cluster, open(cp, "w"))
    out = subprocess.run([cli, "plan", "--model", mp, "--cluster", cp, "--schedule", schedule, "--devices", str(p),
                          "--microbatches", str(m), "--chunks", str(chunks), "--partition", "uniform", "--json"],
                         capture_output=True, text=True, check=True)
    devices = json.loads(out.stdout)["metrics"]["devices"]
    return max(d["peak_activation_bytes"] for d in devices), max(d["span_ms"] - d["busy_ms"] for d in devices)


def main():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    cli = sys.argv[1] if len(sys.argv) > 1 else os.path.join(root, "build", "release", "app", "pipestudio-cli")
    print("| p | passes F/B/W | zb-v | v-half | v-min |")
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as work:
        for p in (8, 16, 64):
            for f, b, w in ((1, 1, 1), (1, 1.3, 0.7)):
                base_mem, base_bubble = plan(cli, work, 2 * p, p, 4 * p, "1f1b", 1, f, b, w)
                cells = []
                for schedule in ("zb-v", "v-half", "v-min"):
                    mem, bubble = plan(cli, work, 2 * p, p, 4 * p, schedule, 2, f, b, w)
                    cells.append(f"{mem / base_mem:.2f} mem, {bubble / base_bubble:.2f} bubble")
                print(f"| {p} | {f}/{b}/{w} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
