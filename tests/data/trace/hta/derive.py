#!/usr/bin/env python3
"""Derives the small plain-profiler fixtures here from HolisticTraceAnalysis' test traces.

Source: github.com/facebookresearch/HolisticTraceAnalysis, tests/data/trace_filter/
sampled_rank-{0,1}.json.gz (MIT License, Copyright (c) Meta Platforms, Inc. and affiliates; see
LICENSE.HTA beside this file). Two ranks of a 128-GPU data-parallel job captured with the PyTorch
profiler: no `PP:` annotations, two ProfilerStep#N ranges per rank on the host thread, GPU
kernels, memcpy and memset on several streams.

Kept: the trace header (distributedInfo, baseTimeNanoseconds when present), process/thread
metadata, the host ProfilerStep# ranges and every GPU event (kernel, gpu_memcpy, gpu_memset),
with their args. Dropped: cpu_op, cuda_runtime and other host ranges, which the import stores
but the comparison does not read. Timestamps and names are unchanged.

    python3 derive.py HTA_REPO
"""
import gzip
import json
import os
import sys

KEEP_CATEGORIES = {"kernel", "gpu_memcpy", "gpu_memset"}


def derive(source, target):
    with gzip.open(source, "rt") as f:
        doc = json.load(f)
    events = []
    for e in doc["traceEvents"]:
        if e.get("ph") == "M" or e.get("cat") in KEEP_CATEGORIES or str(e.get("name", "")).startswith("ProfilerStep#"):
            events.append(e)
    out = {k: v for k, v in doc.items() if k != "traceEvents"}
    out["traceEvents"] = events
    with gzip.open(target, "wt") as f:
        json.dump(out, f, separators=(",", ":"))
    return len(events)


if __name__ == "__main__":
    repo = sys.argv[1]
    here = os.path.dirname(os.path.abspath(__file__))
    for rank in (0, 1):
        source = os.path.join(repo, "tests/data/trace_filter/sampled_rank-%d.json.gz" % rank)
        n = derive(source, os.path.join(here, "rank%d.json.gz" % rank))
        print("rank %d: %d events" % (rank, n))
