#!/usr/bin/env python3
"""Lowers a compute-only schedule CSV the way torch.distributed.pipelining's runtime does.

`_PipelineScheduleRuntime` turns a compute-only order into the compute_comms one it runs:
`_add_unshard_reshard` (FSDP unshard/reshard, three stages ahead), `_add_reduce_grad` (after each
stage's last W or B) and `_add_send_recv`. This runs those three functions of a local copy of
PyTorch's schedules.py (torch stubbed out, see torch_reference.py) on a CSV that
`pipestudio-cli export --format csv` wrote, and prints the compute_comms CSV as PyTorch's
csv.writer writes it. It is how tests/data/pytorch/fsdp_*_comms.csv were made: PipeStudio's
own lowering and import are checked against them without PyTorch.

    python3 bench/pytorch/lower_csv.py COMPUTE_ONLY.csv MICROBATCHES [--reference DIR] > OUT.csv
"""
import argparse
import csv
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

import torch_reference  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv")
    parser.add_argument("microbatches", type=int)
    parser.add_argument("--reference", default=os.environ.get("PIPESTUDIO_TORCH_REFERENCE",
                                                              os.path.join(ROOT, "reference", "pytorch")))
    args = parser.parse_args()
    missing = torch_reference.missing_files(args.reference)
    if missing:
        print(f"lower_csv: {args.reference} lacks {', '.join(missing)} (see torch_reference.py)", file=sys.stderr)
        return 1
    schedules = torch_reference.load(args.reference)
    with open(args.csv, newline="") as f:
        rows = [[schedules._Action.from_str(cell) for cell in row if cell.strip()] for row in csv.reader(f)]
    stage_to_rank = {}
    for rank, row in enumerate(rows):
        for action in row:
            for a in action.sub_actions or (action,):
                stage_to_rank[a.stage_index] = rank
    order = {}
    for rank, row in enumerate(rows):
        order[rank] = schedules._add_reduce_grad(schedules._add_unshard_reshard(row), args.microbatches)
    lowered = schedules._add_send_recv(order, stage_to_rank=lambda s: stage_to_rank[s],
                                       num_stages=len(stage_to_rank))
    writer = csv.writer(sys.stdout)
    for rank in sorted(lowered):
        writer.writerow(lowered[rank])
    return 0


if __name__ == "__main__":
    sys.exit(main())
