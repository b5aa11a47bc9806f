"""Loads torch.distributed.pipelining's schedule classes from a local copy with torch stubbed out.

The copy is PyTorch's own torch/distributed/pipelining/schedules.py and _utils.py (not part of
PipeStudio; never fetched by this script): copy them into reference/pytorch/ at the repository
root (ignored by git), or point $PIPESTUDIO_TORCH_REFERENCE at a folder holding them. Every other
module they import (torch, torch.distributed, .stage, .microbatch, ...) is a stub whose attributes
are empty classes: the schedule classes only build their per-rank action lists, which need none
of them.
"""
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import types

PACKAGE = "torch.distributed.pipelining"
REFERENCE_FILES = ["schedules", "_utils"]


class _Stub:
    """Stands in for any torch class or function: takes any arguments, is a context manager."""

    def __init__(self, *args, **kwargs):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class _StubModule(types.ModuleType):
    """A module whose every missing attribute is a fresh subclass of _Stub."""

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        value = type(name, (_Stub,), {})
        setattr(self, name, value)
        return value


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Stubs `torch` and its submodules, except the reference files loaded for real."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "torch" and not fullname.startswith("torch."):
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec):
        module = _StubModule(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module):
        parent, _, child = module.__name__.rpartition(".")
        if parent and parent in sys.modules:
            setattr(sys.modules[parent], child, module)


def missing_files(folder):
    return [f + ".py" for f in REFERENCE_FILES if not os.path.isfile(os.path.join(folder, f + ".py"))]


def load(folder):
    """Returns PyTorch's schedules module loaded from `folder`."""
    if not any(isinstance(f, _StubFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _StubFinder())
    import torch.distributed.pipelining  # noqa: F401  (the stub package the real files sit in)

    modules = {}
    for name in ["_utils", "schedules"]:  # schedules imports ._utils
        full = f"{PACKAGE}.{name}"
        spec = importlib.util.spec_from_file_location(full, os.path.join(folder, name + ".py"))
        module = importlib.util.module_from_spec(spec)
        sys.modules[full] = module
        spec.loader.exec_module(module)
        modules[name] = module
    return modules["schedules"]


class FakeStage:
    """What the schedule constructors read of a _PipelineStageBase."""

    def __init__(self, stage_index, num_stages, group_size, group_rank=0):
        self.stage_index = stage_index
        self.num_stages = num_stages
        self.group_size = group_size
        self.group_rank = group_rank
        self.submod = None
        self.is_first = stage_index == 0
        self.is_last = stage_index == num_stages - 1
        self.stage_index_to_group_rank = {}


# PyTorch's schedule name → (stages per rank, placement style): "loop" puts stage s on rank
# s % p, "v" runs chunk 0 down the ranks and chunk 1 back up.
SCHEDULES = {
    "GPipe": (1, "loop"),
    "1F1B": (1, "loop"),
    "Interleaved1F1B": (2, "loop"),
    "LoopedBFS": (2, "loop"),
    "InterleavedZeroBubble": (2, "loop"),
    "ZBVZeroBubble": (2, "v"),
    "DualPipeV": (2, "v"),
}


class RecordingStage(FakeStage):
    """A single-stage schedule's stage that records what `_step_microbatches` runs on it: the
    order its rank executes (the class's pipeline_order is only a picture of it)."""

    def __init__(self, stage_index, num_stages, group_size):
        super().__init__(stage_index, num_stages, group_size, group_rank=stage_index)
        self.actions = []

    def forward_one_chunk(self, mb, *args, **kwargs):
        self.actions.append(f"{self.stage_index}F{mb}")

    def backward_one_chunk(self, mb, *args, **kwargs):
        self.actions.append(f"{self.stage_index}B{mb}")

    def __getattr__(self, name):  # p2p ops, infrastructure, gradient reduction: nothing to do
        if name.startswith("__"):
            raise AttributeError(name)
        return lambda *args, **kwargs: []


def compute_order(schedules, name, ranks, microbatches, stages_per_rank=None):
    """PyTorch's compute-only action list per rank (None steps dropped) as CSV cells, or raises
    the constructor's error (e.g. an unsupported microbatch count). Single-stage schedules
    (GPipe, 1F1B) are run rank by rank on recording stages; multi-stage ones give their
    pipeline_order, which their runtime executes as it stands."""
    local, style = SCHEDULES[name]
    local = stages_per_rank or local
    cls = schedules.get_schedule_class(name)
    num_stages = ranks * local
    if local == 1:
        rows = []
        for rank in range(ranks):
            stage = RecordingStage(rank, num_stages, ranks)
            schedule = cls(stage, microbatches, loss_fn=lambda *_: None)
            schedule._step_microbatches(target_mbs=[None] * microbatches)
            rows.append(stage.actions)
        return rows
    else:
        mapping = schedules.generate_rank_to_stage_mapping(ranks, num_stages, style=style)
        stages = [FakeStage(s, num_stages, ranks) for s in mapping[0]]
        schedule = cls(stages, microbatches, loss_fn=lambda *_: None)
    rows = []
    for rank in range(ranks):
        rows.append([str(a) for a in schedule.pipeline_order[rank] if a is not None])
    return rows
