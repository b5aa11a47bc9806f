#!/usr/bin/env python3
"""PipeStudio's schedules against torch.distributed.pipelining's own, at unit costs.

PyTorch's schedule classes are run from a local copy of torch/distributed/pipelining/
{schedules,_utils}.py with torch stubbed out (torch_reference.py; copy the two files into
reference/pytorch/ at the repository root, which git ignores, or point --reference or
$PIPESTUDIO_TORCH_REFERENCE at them). Without them the script says so and exits 0, so `make test`,
`make bench` and CI never need them.

Every plan is timed by the same simulator: PyTorch's per-rank compute order is written as schedule
CSV (its own action strings, `(…)OVERLAP_F_B` included) and planned with `pipestudio-cli plan
--schedule custom --csv`, ours with `pipestudio-cli plan --schedule NAME` (our name for the same
schedule). Unit costs: every virtual stage is one layer with F = I = W = 1 (a full backward B = 2),
transfers are free; makespan in those units ("steps"), peak activation in chunk activations.

    python3 bench/pytorch/compare.py [--cli build/release/app/pipestudio-cli] [--details]

Prints one Markdown table: per schedule, over p ∈ {2, 4, 8} and m ∈ {p, 2p, 2p+2, 4p}, the cases
both can run, wins / ties / losses on the makespan, worst ratio and cases where our peak activation
exceeds PyTorch's; with --details one line per case.
"""
import argparse
import importlib.util
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

import torch_reference  # noqa: E402


def _zero_bubble_compare():
    """bench/reference/compare.py (its model and cluster documents and CLI runner)."""
    spec = importlib.util.spec_from_file_location("zero_bubble_compare",
                                                  os.path.join(ROOT, "bench", "reference", "compare.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_zb = _zero_bubble_compare()
ACT, Cli = _zb.ACT, _zb.Cli

TIE = 1e-6
# PyTorch's name → (ours, chunks per device).
PAIRS = [
    ("GPipe", "gpipe", 1),
    ("1F1B", "1f1b", 1),
    ("Interleaved1F1B", "interleaved-1f1b", 2),
    ("LoopedBFS", "breadth-first", 2),
    ("InterleavedZeroBubble", "interleaved-zb", 2),
    ("ZBVZeroBubble", "zb-v", 2),
    ("DualPipeV", "dualpipe-v", 2),
]


def serial_cells(cell):
    """`(0F7;7B3)OVERLAP_F_B` → its two actions; any other cell as it is."""
    if cell.startswith("(") and cell.endswith(")OVERLAP_F_B"):
        return cell[1:-len(")OVERLAP_F_B")].split(";")
    return [cell]


def unit_case(p, m, chunks):
    return {"p": p, "m": m, "c": 0, "wgrad": ACT, "costs": [(1, 1, 1)] * (p * chunks)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reference", default=os.environ.get("PIPESTUDIO_TORCH_REFERENCE",
                                                          os.path.join(ROOT, "reference", "pytorch")))
    ap.add_argument("--cli", default=os.path.join(ROOT, "build", "release", "app", "pipestudio-cli"))
    ap.add_argument("--details", action="store_true", help="one line per case")
    ap.add_argument("--only", default="", help="comma-separated PyTorch names")
    args = ap.parse_args()
    missing = torch_reference.missing_files(args.reference)
    if missing:
        print(f"PyTorch comparison skipped: {args.reference} lacks {', '.join(missing)} (copy them from "
              "pytorch/pytorch, torch/distributed/pipelining/)")
        return 0
    if not os.access(args.cli, os.X_OK):
        print(f"PyTorch comparison skipped: {args.cli} is not built")
        return 0
    schedules = torch_reference.load(args.reference)
    only = set(filter(None, args.only.split(",")))
    rows, details = [], []
    with tempfile.TemporaryDirectory() as work:
        cli = Cli(args.cli, work)
        for torch_name, ours_name, chunks in PAIRS:
            if only and torch_name not in only:
                continue
            wins = ties = losses = over = theirs_refused = ours_failed = 0
            worst = None
            for p in (2, 4, 8):
                for m in (p, 2 * p, 2 * p + 2, 4 * p):
                    case = unit_case(p, m, chunks)
                    label = f"{torch_name} p={p} m={m}"
                    try:
                        csv_rows = torch_reference.compute_order(schedules, torch_name, p, m)
                    except Exception as e:  # the class refuses the shape (its own check)
                        theirs_refused += 1
                        details.append(f"{label}: PyTorch refuses ({str(e).splitlines()[0][:100]})")
                        continue
                    theirs = cli.plan(case, "custom", chunks, csv_rows)
                    if any("OVERLAP_F_B" in cell for row in csv_rows for cell in row):
                        # Overlapped pairs are timed as DualPipe's overlap (a pair starts when both
                        # inputs are there); with no collectives to hide, running the two one after
                        # the other is never slower: PyTorch gets the better of the two.
                        serial = [[c for cell in row for c in serial_cells(cell)] for row in csv_rows]
                        plain = cli.plan(case, "custom", chunks, serial)
                        if "error" in theirs or ("error" not in plain and plain["makespan"] < theirs["makespan"]):
                            theirs = plain
                    ours = cli.plan(case, ours_name, chunks)
                    if "error" in theirs or "error" in ours:
                        ours_failed += 1
                        details.append(f"{label}: failed (ours: {ours.get('error', 'ok')}; "
                                       f"theirs: {theirs.get('error', 'ok')})")
                        continue
                    ratio = ours["makespan"] / theirs["makespan"]
                    worst = ratio if worst is None else max(worst, ratio)
                    if ratio < 1 - TIE:
                        wins += 1
                    elif ratio > 1 + TIE:
                        losses += 1
                    else:
                        ties += 1
                    if ours["peak"] > theirs["peak"] + 1e-9:
                        over += 1
                    details.append(f"{label}: ours {ours['makespan']:g} (peak {ours['peak']:g}) "
                                   f"PyTorch {theirs['makespan']:g} (peak {theirs['peak']:g})")
            n = wins + ties + losses
            worst_text = f"{100 * (worst - 1):+.1f}%" if worst is not None else "–"
            rows.append(f"| {torch_name} | {ours_name} | {n} | {wins} / {ties} / {losses} | {worst_text} | {over} | "
                        f"{theirs_refused} | {ours_failed} |")
    print("Unit costs (F = I = W = 1, B = 2, free transfers), p ∈ {2, 4, 8}, m ∈ {p, 2p, 2p+2, 4p}; "
          f"PyTorch's classes from {args.reference}")
    print()
    print("| PyTorch | ours | cases | wins / ties / losses | worst (ours ÷ PyTorch − 1) | ours above PyTorch's peak "
          "| PyTorch refuses | failed |")
    print("|---|---|---:|---|---:|---:|---:|---:|")
    for r in rows:
        print(r)
    if args.details:
        print()
        for line in details:
            print("  " + line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
