#!/usr/bin/env python3
"""Produces the OpenTelemetry spans Megatron-LM's pipeline emits, from Megatron's own code.

Megatron-LM instruments its pipeline with nemo-lens (megatron/core/pipeline_parallel/schedules.py:
`megatron.microbatch.forward` on forward_step, `megatron.microbatch.backward` on backward_step;
p2p_communication.py: `megatron.p2p.{send,recv}_{forward,backward}`; training.py:
`megatron.train.iteration` around each train_step, group `step`, attribute `megatron.iteration`: the
iterations done before it, 0 first in a fresh run). This runs the real
forward_backward_pipelining_without_interleaving (1F1B) of a local Megatron-LM copy
(reference/megatron-lm, see megatron_reference.py) once per pipeline rank, with torch and the
process groups stubbed and nemo-lens's trace_fn replaced by a recorder on a simulated clock: a
forward takes --forward-ms, a backward --backward-ms, a p2p call --p2p-ms, and a receive also waits,
on that clock, for the send it pairs with on the neighbour rank (ranks are run in the order their
inputs become available). The spans of each rank are written as one OTLP/JSON file (what an
OpenTelemetry collector's file exporter writes: resourceSpans → scopeSpans → spans, times in Unix
nanoseconds as strings) or, with --jaeger, one Jaeger JSON export for all ranks (data[].spans,
processes; times in microseconds).

    python3 bench/megatron/otel_spans.py --pp 4 --microbatches 8 --iterations 2 OUT_DIR [--jaeger]

Without the Megatron-LM copy it says so and exits 0.
"""
import argparse
import contextlib
import io
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import megatron_reference  # noqa: E402

BASE_NS = 1_750_000_000_000_000_000  # the simulated clock's origin (Unix ns)


class Recorder:
    """nemo-lens's trace_fn on a simulated clock: one span per call of a decorated function."""

    def __init__(self, costs_ms):
        self.costs_ms = costs_ms
        self.clock_ns = 0
        self.spans = []
        self.stack = []
        self.trace_id = "0" * 31 + "1"
        self.waits = {}  # (kind, microbatch) -> ns before which a receive cannot end
        self.rank = 0
        self.microbatch = {"forward": 0, "backward": 0}

    def trace_fn(self, group, name, tracer=None):
        def decorator(func):
            def wrapped(*args, **kwargs):
                return self.record(name, func, args, kwargs)

            wrapped.__name__ = getattr(func, "__name__", name)
            return wrapped

        return decorator

    def span(self, name, start_ns, end_ns, attributes=None):
        span_id = f"{len(self.spans) + 1:016x}"
        parent = self.stack[-1] if self.stack else None
        self.spans.append(
            {"name": name, "span_id": span_id, "parent": parent, "start": start_ns, "end": end_ns, "attributes": attributes or {}}
        )
        return span_id

    def record(self, name, func, args, kwargs):
        start = self.clock_ns
        index = len(self.spans)
        self.span(name, start, start)
        self.stack.append(self.spans[index]["span_id"])
        try:
            result = func(*args, **kwargs)
        finally:
            self.stack.pop()
        self.clock_ns += int(self.costs_ms.get(name, 0.0) * 1e6)
        self.spans[index]["end"] = self.clock_ns
        return result


def load_schedules(folder, recorder):
    megatron_reference.VALUES["nemo.lens.helpers"] = {"trace_fn": recorder.trace_fn}
    megatron_reference.install(folder)
    import torch

    from megatron.core.pipeline_parallel import p2p_communication, schedules

    return torch, schedules, p2p_communication


def run_rank(schedules, p2p, torch, rank, pp, microbatches):
    """One 1F1B step of pipeline rank `rank` under Megatron's own schedule."""

    class Group:
        def rank(self):
            return self.r

        def size(self):
            return self.size_

        def __init__(self, r, size):  # noqa: F811 (size() is the method)
            self.r, self.size_ = r, size

    pp_group = Group(rank, pp)
    torch.distributed.get_rank = lambda group=None: group.r if group is not None else rank
    torch.distributed.get_world_size = lambda group=None: group.size_ if group is not None else pp
    torch.distributed.is_initialized = lambda: True

    class Config:
        """The model config fields the schedule reads (megatron/core/model_parallel_config.py)."""

        def __getattr__(self, name):
            return None

    config = Config()
    config.pipeline_dtype = "bfloat16"
    config.sequence_parallel = False
    config.batch_p2p_comm = True
    config.batch_p2p_sync = False
    config.overlap_p2p_comm = False
    config.variable_seq_lengths = False
    config.deallocate_pipeline_outputs = False
    config.num_microbatches_with_partial_activation_checkpoints = None
    config.grad_scale_func = None
    config.calculate_per_token_loss = False
    config.barrier_with_L1_time = False
    config.fine_grained_activation_offloading = False
    config.finalize_model_grads_func = None
    config.no_sync_func = None
    config.grad_sync_func = None
    config.param_sync_func = None

    class Communicator(p2p.P2PCommunicator):
        """Megatron's P2PCommunicator with its transport stubbed: _communicate moves nothing."""

        def __init__(self):
            self.config = config
            self.pp_group = pp_group

        def _communicate(self, **kwargs):
            return None, None, []

    model = torch.nn.Module()
    schedules.get_model_config = lambda m: config
    schedules.get_model_type = lambda m: None
    schedules.get_attr_wrapped_model = lambda m, name, **k: (lambda *a, **kw: None)

    def forward_step_func(data_iterator, model, *args):
        return torch.ones(1), (lambda output, *a: (torch.ones(1), {}))

    class Pg(schedules.ProcessGroupCollection):  # a stub class of the stubbed process_groups_config
        tp = cp = dp = dp_cp = embd = pos_embd = Group(0, 1)
        pp = pp_group

    schedules.forward_backward_pipelining_without_interleaving(
        forward_step_func=forward_step_func,
        data_iterator=iter(range(microbatches)),
        model=[model],
        num_microbatches=microbatches,
        seq_length=128,
        micro_batch_size=1,
        p2p_communicator=Communicator(),
        pg_collection=Pg(),
    )


def retime(ranks, costs_ms, p2p_ms):
    """Times each rank's spans in Megatron's order on one clock: a forward of microbatch k waits for
    the previous rank's, a backward for the next rank's (plus a p2p transfer); a receive span lasts
    until its data is there. Returns per rank the (name, start_ns, end_ns) list."""
    pp = len(ranks)
    ns = lambda ms: int(round(ms * 1e6))  # noqa: E731
    fwd_end = [dict() for _ in range(pp)]
    bwd_end = [dict() for _ in range(pp)]
    cursor = [0] * pp
    clock = [0] * pp
    done = [0, 0]
    counts = [{"forward": 0, "backward": 0} for _ in range(pp)]
    out = [[] for _ in range(pp)]

    def ready(r, kind):
        k = counts[r][kind]
        if kind == "forward":
            return 0 if r == 0 else (fwd_end[r - 1].get(k) + ns(p2p_ms) if k in fwd_end[r - 1] else None)
        return 0 if r == pp - 1 else (bwd_end[r + 1].get(k) + ns(p2p_ms) if k in bwd_end[r + 1] else None)

    progress = True
    while progress:
        progress = False
        for r in range(pp):
            while cursor[r] < len(ranks[r]):
                name = ranks[r][cursor[r]]
                short = name.rsplit(".", 1)[-1]
                if short in ("forward", "backward") or short.startswith("recv_"):
                    kind = short if short in ("forward", "backward") else short[len("recv_"):]
                    dep = ready(r, kind)
                    if dep is None:
                        break
                    start = clock[r]
                    if short.startswith("recv_"):
                        end = max(start, dep) + ns(costs_ms.get(name, 0.0))
                    else:
                        start = max(start, dep)
                        end = start + ns(costs_ms.get(name, 0.0))
                        (fwd_end if kind == "forward" else bwd_end)[r][counts[r][kind]] = end
                        counts[r][kind] += 1
                else:
                    start = clock[r]
                    end = start + ns(costs_ms.get(name, 0.0))
                out[r].append((name, start, end))
                clock[r] = end
                cursor[r] += 1
                progress = True
    if any(cursor[r] < len(ranks[r]) for r in range(pp)):
        raise RuntimeError("the ranks' orders deadlock")
    return out


def otlp_document(rank, pp, iterations, trace_ids):
    """One rank's spans as an OTLP/JSON export (resourceSpans)."""
    spans = []
    for span in iterations:
        spans.append(span)
    return {
        "resourceSpans": [
            {
                "resource": {
                    "attributes": [
                        {"key": "service.name", "value": {"stringValue": "megatron-lm"}},
                        {"key": "dl.rank", "value": {"intValue": str(rank)}},
                        {"key": "dl.pipeline_parallel.size", "value": {"intValue": str(pp)}},
                    ]
                },
                "scopeSpans": [{"scope": {"name": "nemo.lens"}, "spans": spans}],
            }
        ]
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--pp", type=int, default=4)
    parser.add_argument("--microbatches", type=int, default=8)
    parser.add_argument("--iterations", type=int, default=1)
    parser.add_argument("--forward-ms", type=float, default=4.0)
    parser.add_argument("--backward-ms", type=float, default=8.0)
    parser.add_argument("--p2p-ms", type=float, default=0.2)
    parser.add_argument("--optimizer-ms", type=float, default=1.0)
    parser.add_argument("--jaeger", action="store_true")
    parser.add_argument("--reference")
    o = parser.parse_args()
    folder = megatron_reference.reference_folder(o.reference)
    if not os.path.isfile(os.path.join(folder, "megatron", "core", "pipeline_parallel", "schedules.py")):
        print(f"otel_spans: {folder} holds no Megatron-LM copy (see megatron_reference.py)", file=sys.stderr)
        return 0
    costs = {
        "megatron.microbatch.forward": o.forward_ms,
        "megatron.microbatch.backward": o.backward_ms,
        "megatron.p2p.send_forward": o.p2p_ms,
        "megatron.p2p.send_backward": o.p2p_ms,
        "megatron.p2p.recv_forward": o.p2p_ms,
        "megatron.p2p.recv_backward": o.p2p_ms,
    }
    recorder = Recorder({})
    with contextlib.redirect_stdout(io.StringIO()):
        torch, schedules, p2p = load_schedules(os.path.abspath(folder), recorder)
    orders = []
    for rank in range(o.pp):
        recorder.spans = []
        run_rank(schedules, p2p, torch, rank, o.pp, o.microbatches)
        orders.append([s["name"] for s in recorder.spans])
    timed = retime(orders, costs, o.p2p_ms)
    step_ns = max(end for spans in timed for _, _, end in spans) + int(o.optimizer_ms * 1e6)
    per_rank = [[] for _ in range(o.pp)]
    jaeger = []
    for iteration in range(o.iterations):
        trace_id = f"{iteration + 1:032x}"
        offset = BASE_NS + iteration * step_ns
        for rank in range(o.pp):
            step_id = f"{rank + 1:04x}{iteration + 1:04x}00000000"
            per_rank[rank].append(
                {
                    "traceId": trace_id,
                    "spanId": step_id,
                    "name": "megatron.train.iteration",
                    "kind": 1,
                    "startTimeUnixNano": str(offset),
                    "endTimeUnixNano": str(offset + step_ns),
                    "attributes": [{"key": "megatron.iteration", "value": {"intValue": str(iteration)}}],
                }
            )
            for index, (name, start, end) in enumerate(timed[rank]):
                per_rank[rank].append(
                    {
                        "traceId": trace_id,
                        "spanId": f"{rank + 1:04x}{iteration + 1:04x}{index + 1:08x}",
                        "parentSpanId": step_id,
                        "name": name,
                        "kind": 1,
                        "startTimeUnixNano": str(offset + start),
                        "endTimeUnixNano": str(offset + end),
                    }
                )
    os.makedirs(o.out, exist_ok=True)
    if o.jaeger:
        processes = {f"p{rank + 1}": {"serviceName": "megatron-lm", "tags": [
            {"key": "dl.rank", "type": "int64", "value": rank},
            {"key": "dl.pipeline_parallel.size", "type": "int64", "value": o.pp}]} for rank in range(o.pp)}
        traces = {}
        for rank in range(o.pp):
            for span in per_rank[rank]:
                start = int(span["startTimeUnixNano"])
                end = int(span["endTimeUnixNano"])
                entry = {
                    "traceID": span["traceId"],
                    "spanID": span["spanId"],
                    "operationName": span["name"],
                    "references": [{"refType": "CHILD_OF", "traceID": span["traceId"], "spanID": span["parentSpanId"]}]
                    if "parentSpanId" in span else [],
                    "startTime": start // 1000,
                    "duration": (end - start) // 1000,
                    "tags": [{"key": a["key"], "type": "int64", "value": int(a["value"]["intValue"])}
                             for a in span.get("attributes", [])],
                    "processID": f"p{rank + 1}",
                }
                traces.setdefault(span["traceId"], []).append(entry)
        document = {"data": [{"traceID": t, "spans": spans, "processes": processes} for t, spans in traces.items()]}
        with open(os.path.join(o.out, "jaeger.json"), "w") as f:
            json.dump(document, f, indent=1)
    else:
        for rank in range(o.pp):
            with open(os.path.join(o.out, f"rank{rank}.otlp.json"), "w") as f:
                json.dump(otlp_document(rank, o.pp, per_rank[rank], None), f, indent=1)
    print(json.dumps({"ranks": o.pp, "spans_per_rank": [len(s) for s in per_rank], "step_ms": step_ns / 1e6}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
