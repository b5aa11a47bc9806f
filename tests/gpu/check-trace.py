#!/usr/bin/env python3
"""Reads a PipeStudio trace stream (core/trace/FORMAT.md) written by pipestudio-exec on a GPU
and checks what tests/gpu/run.sh promises of CUPTI:

- kernel, memcpy/memset and NCCL records arrive (NCCL kernels only under the `cuda` backend);
- one clock: every activity lies inside the run (from 10 s before the header's origin, for
  start-up work, to 50 ms after the last op), and 95 % of the kernels between a device's first and
  last op start inside an op range of that device; each device's Adam kernel starts within 50 µs
  (median) of its OPT range;
- the dropped-record count of the summary, printed.

    tests/gpu/check-trace.py STREAM [--json]
Exit 0 when the checks hold, 1 when one fails, 2 when the stream cannot be read.
"""
import bisect
import collections
import json
import struct
import sys

KINDS = ["F", "B", "W", "BW", "N", "S", "T", "OPT"]
ACTIVITY = ["kernel", "memcpy", "memset", "nccl"]


class Reader:
    def __init__(self, data, pos=0):
        self.data, self.pos = data, pos

    def take(self, fmt):
        values = struct.unpack_from("<" + fmt, self.data, self.pos)
        self.pos += struct.calcsize("<" + fmt)
        return values

    def string(self):
        (n,) = self.take("I")
        s = self.data[self.pos:self.pos + n]
        self.pos += n
        return s.decode("utf-8", "replace")


def decode(data):
    if data[:4] != b"PSTR":
        raise ValueError("not a PipeStudio trace stream (magic)")
    (version,) = struct.unpack_from("<H", data, 4)
    if version != 1:
        raise ValueError(f"stream version {version}, expected 1")
    pos, frames = 8, []
    while pos + 5 <= len(data):
        ftype, length = struct.unpack_from("<BI", data, pos)
        payload = Reader(data[pos + 5:pos + 5 + length])
        if len(payload.data) < length:
            raise ValueError(f"byte {pos}: truncated frame")
        pos += 5 + length
        if ftype == 1:
            (v,) = payload.take("H")
            run_id = payload.string()
            rank, world = payload.take("ii")
            host, backend, device = payload.string(), payload.string(), payload.string()
            origin, wall = payload.take("qq")
            frames.append(("header", dict(rank=rank, world=world, backend=backend, device=device)))
        elif ftype == 3:
            begin, dev, vs, kind, mb, it, start, end = payload.take("?iiBiiqq")
            if not begin:
                frames.append(("op", dict(device=dev, kind=KINDS[kind], mb=mb, it=it, start=start, end=end)))
        elif ftype == 4:
            kind, dev, stream, start, end, nbytes, corr = payload.take("BiIqqQQ")
            frames.append(("activity", dict(kind=ACTIVITY[kind], device=dev, stream=stream, start=start,
                                            end=end, bytes=nbytes, name=payload.string())))
        elif ftype == 6:
            (rank,) = payload.take("i")
            frames.append(("error", dict(rank=rank, message=payload.string())))
        elif ftype == 7:
            iters, dropped, elapsed, ok, n = payload.take("iQq?I")
            steps = list(payload.take(f"{n}d"))
            frames.append(("summary", dict(iterations=iters, dropped=dropped, elapsed_ns=elapsed, ok=ok,
                                           iteration_ms=steps)))
    if pos != len(data):
        raise ValueError(f"byte {pos}: stream cut inside a frame")
    return frames


def check(frames):
    ops = [f for t, f in frames if t == "op"]
    acts = [f for t, f in frames if t == "activity"]
    summaries = [f for t, f in frames if t == "summary"]
    header = next((f for t, f in frames if t == "header"), {})
    counts = collections.Counter(a["kind"] for a in acts)
    report = dict(backend=header.get("backend"), device=header.get("device"), ops=len(ops),
                  activities=dict(counts), errors=[f["message"] for t, f in frames if t == "error"])
    problems = []
    if not summaries:
        problems.append("no summary frame")
    else:
        s = summaries[-1]
        report.update(dropped_records=s["dropped"], ok=s["ok"],
                      step_ms=sum(s["iteration_ms"]) / max(1, len(s["iteration_ms"])))
        if not s["ok"]:
            problems.append("the run reports failure")
    if counts["kernel"] == 0:
        problems.append("no CUPTI kernel records")
    if counts["memcpy"] + counts["memset"] == 0:
        problems.append("no CUPTI memcpy/memset records")
    if header.get("backend") == "cuda" and counts["nccl"] == 0:
        problems.append("no NCCL kernel records under the cuda backend")
    if ops and acts:
        last = max(o["end"] for o in ops)
        outside = [a for a in acts if a["start"] < -10_000_000_000 or a["end"] > last + 50_000_000 or a["end"] < a["start"]]
        report["activities_outside_run"] = len(outside)
        if outside:
            problems.append(f"{len(outside)} activity records outside the run's time (clock mapping)")
        # Kernels of the measured iterations inside an op range of their device (cuda-single: one
        # stream per device). Warm-up iterations and calibration run before the first recorded op.
        by_device = collections.defaultdict(list)
        for o in ops:
            by_device[o["device"]].append((o["start"], o["end"]))
        inside = total = 0
        for a in acts:
            ranges = sorted(by_device.get(a["device"], []))
            if a["kind"] != "kernel" or a["name"] == "pipestudio_clock_marker":
                continue  # markers (PIPESTUDIO_EXEC_KEEP_MARKERS) sit just before their op's begin
            if not ranges or not ranges[0][0] <= a["start"] <= ranges[-1][1]:
                continue
            starts = [r[0] for r in ranges]
            i = bisect.bisect_right(starts, a["start"]) - 1
            total += 1
            # 20 µs of slack: an op's end event is recorded after its last kernel is enqueued.
            if i >= 0 and ranges[i][0] - 20_000 <= a["start"] <= ranges[i][1] + 20_000:
                inside += 1
        report["kernels_inside_their_device_ops"] = f"{inside}/{total}"
        if total and inside < 0.95 * total:
            problems.append(f"only {inside} of {total} kernels start inside an op of their device (clock or device mapping)")
        # The sharpest test of one clock: each device's optimizer step is one Adam kernel launched
        # right after the OPT range's begin event, so the two starts agree within microseconds.
        opt = [o for o in ops if o["kind"] == "OPT"]
        adam = [a for a in acts if a["kind"] == "kernel" and "adamKernel" in a["name"]]
        gaps = []
        for o in opt:
            near = [a["start"] - o["start"] for a in adam
                    if a["device"] == o["device"] and abs(a["start"] - o["start"]) < 20_000_000]
            if near:
                gaps.append(min(near, key=abs))
        if gaps:
            gaps.sort()
            median = gaps[len(gaps) // 2]
            report["adam_kernel_minus_opt_range_us"] = dict(median=round(median / 1e3, 1),
                                                            min=round(gaps[0] / 1e3, 1), max=round(gaps[-1] / 1e3, 1))
            if abs(median) > 50_000:
                problems.append(f"optimizer kernels start {median / 1e3:.0f} µs from their OPT ranges (clock mapping)")
    report["problems"] = problems
    return report


def main(argv):
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        with open(argv[1], "rb") as f:
            frames = decode(f.read())
    except (OSError, ValueError, struct.error) as e:
        print(f"{argv[1]}: {e}", file=sys.stderr)
        return 2
    report = check(frames)
    if "--json" in argv:
        print(json.dumps(report, indent=1))
    else:
        print(f"{argv[1]}: " + ", ".join(f"{k}={v}" for k, v in report.items() if k != "problems"))
        for p in report["problems"]:
            print(f"  PROBLEM: {p}")
    return 1 if report["problems"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
