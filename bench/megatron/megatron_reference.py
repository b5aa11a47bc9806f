"""Loads Megatron-LM's argument parser and argument checks from a local copy, torch stubbed out.

The copy is NVIDIA/Megatron-LM's own `megatron/` package (not part of PipeStudio; never fetched by
this script): put the tree at reference/megatron-lm/ in the repository root (ignored by git), e.g.
`git -C MEGATRON archive COMMIT megatron | tar -x -C reference/megatron-lm`, or point
$PIPESTUDIO_MEGATRON_REFERENCE at such a folder. A file COMMIT beside `megatron/` names the commit
(reported by the checks). The Zero Bubble fork (sail-sg/zero-bubble-pipeline-parallelism) is an
older Megatron-LM with the same layout: reference/zero-bubble-megatron/.

Every `megatron.*` module is loaded from the copy for real, except the ones listed in STUBBED
(CUDA kernels, process groups, checkpointing, datasets: nothing the argument checks read), which
are stubs; so are torch, Transformer Engine and every other third-party package. A stub's
attributes are empty classes that take any arguments; the handful of functions the checks call
for a value (library versions, the GPU's compute capability) answer as on an H100 with current
libraries (VALUES).
"""
import abc
import ast
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import types

# megatron modules that stay stubs: they touch CUDA, NCCL or files when imported or called.
STUBBED = (
    "megatron.core.parallel_state",
    "megatron.core.tensor_parallel",
    "megatron.core.fusions",
    "megatron.core.extensions",
    "megatron.core.dist_checkpointing",
    "megatron.core.datasets",
    "megatron.core.distributed",
    "megatron.core.optimizer",
    "megatron.core.inference",
    "megatron.core.models.common",
    "megatron.core.ssm",
    "megatron.core.tokenizers",
    "megatron.core.export",
    "megatron.core.post_training",
    "megatron.core.resharding",
    "megatron.core.full_cuda_graph",
    "megatron.core.process_groups_config",
    "megatron.training.checkpointing",
    "megatron.training.global_vars",
    "megatron.training.initialize",
    "megatron.training.training",
    "megatron.training.datasets",
    "megatron.training.one_logger_utils",
    "megatron.training.tokenizer",
    "megatron.legacy",
    # layers and model builders (the configuration classes around them are real)
    "megatron.core.models.gpt",
    "megatron.core.models.hybrid.hybrid_layer_specs",
    "megatron.core.models.hybrid.hybrid_model",
    "megatron.core.models.hybrid.hybrid_block",
    "megatron.core.transformer.attention",
    "megatron.core.transformer.torch_norm",
    "megatron.core.transformer.transformer_layer",
    "megatron.core.transformer.transformer_block",
    "megatron.core.transformer.mlp",
    "megatron.core.transformer.multi_latent_attention",
    "megatron.core.transformer.multi_token_prediction",
    "megatron.core.transformer.moe.moe_layer",
    "megatron.core.transformer.moe.experts",
    "megatron.core.transformer.moe.router",
    "megatron.core.transformer.moe.token_dispatcher",
    "megatron.core.transformer.cuda_graphs",
)


class StubType(abc.ABCMeta):
    """Any attribute of a stub class is another stub class (torch.autograd.Function), and stub
    classes combine with `|` in annotations (torch.Tensor | None)."""

    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        value = StubType(name, (Stub,), {"__module__": cls.__module__})
        setattr(cls, name, value)
        return value

    def __or__(cls, other):
        return cls

    def __ror__(cls, other):
        return cls

    def __getitem__(cls, item):
        return cls

    def __iter__(cls):  # an enum the checks list (StrictHandling) has no members
        return iter(())


class Stub(metaclass=StubType):
    """Stands in for any stubbed class or function: takes any arguments, is a context manager,
    and is falsy."""

    def __init__(self, *args, **kwargs):
        pass

    def __call__(self, *args, **kwargs):
        return Stub()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def __bool__(self):
        return False

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return Stub()

    def _same(self, *args):
        return self

    # A stub tensor takes part in arithmetic (loss and token sums) and stays a stub.
    __add__ = __radd__ = __iadd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __imul__ = _same
    __truediv__ = __rtruediv__ = __itruediv__ = __neg__ = _same

    def __iter__(self):
        return iter(())


class StubModule(types.ModuleType):
    """A module whose every missing attribute is a fresh subclass of Stub."""

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        value = StubType(name, (Stub,), {"__module__": self.__name__})
        setattr(self, name, value)
        return value


def _version_true(*args, **kwargs):
    return True


class Version:
    """packaging.version.Version for the comparisons the checks make (release numbers only)."""

    def __init__(self, text):
        parts = []
        for piece in str(text).split("+")[0].split("."):
            digits = "".join(ch for ch in piece if ch.isdigit()) if piece[:1].isdigit() else ""
            if not digits:
                break
            parts.append(int(digits))
        self.release = tuple(parts)
        self.major = parts[0] if parts else 0
        self.minor = parts[1] if len(parts) > 1 else 0
        self.micro = parts[2] if len(parts) > 2 else 0

    def _key(self, other):
        other = other if isinstance(other, Version) else Version(other)
        n = max(len(self.release), len(other.release))
        return self.release + (0,) * (n - len(self.release)), other.release + (0,) * (n - len(other.release))

    def __lt__(self, other):
        a, b = self._key(other)
        return a < b

    def __le__(self, other):
        a, b = self._key(other)
        return a <= b

    def __gt__(self, other):
        a, b = self._key(other)
        return a > b

    def __ge__(self, other):
        a, b = self._key(other)
        return a >= b

    def __eq__(self, other):
        a, b = self._key(other)
        return a == b

    def __hash__(self):
        return hash(self.release)


def _prod(values):
    out = 1
    for v in values:
        out *= v
    return out


# Functions whose answer the checks use: current libraries on a Hopper GPU (compute capability 9.0).
VALUES = {
    "megatron.core.utils": {
        "is_te_min_version": _version_true,
        "is_torch_min_version": _version_true,
        "is_flashinfer_min_version": _version_true,
        "get_torch_version": lambda: Version("2.9.0"),
        "get_te_version": lambda: Version("2.9.0"),
        # logging that asks the (absent) process groups for ranks
        "log_on_each_pipeline_stage": lambda *a, **k: None,
        "log_single_rank": lambda *a, **k: None,
    },
    "megatron.training.utils": {
        "get_device_arch_version": lambda: 9,
        "print_rank_0": lambda *a, **k: None,
        "warn_rank_0": lambda *a, **k: None,
        "update_use_dist_ckpt": lambda args: setattr(args, "use_dist_ckpt", args.ckpt_format != "torch"),
        "is_first_or_last_pipeline_stage": lambda *a, **k: True,
    },
    "numpy": {"prod": _prod},
    "packaging.version": {"Version": Version},
    "packaging": {"version": types.SimpleNamespace(Version=Version)},
}


class PatchingLoader(importlib.machinery.SourceFileLoader):
    """Loads a real megatron module, then sets the functions of VALUES it defines."""

    def exec_module(self, module):
        super().exec_module(module)
        for name, value in VALUES.get(module.__name__, {}).items():
            setattr(module, name, value)


class HollowPackage(types.ModuleType):
    """A real megatron package whose __init__ is not run (it imports half of Megatron): a name it
    would import from a submodule is imported from there when first asked for; any other name is a
    stub."""

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        source = self.__dict__.get("_reexports", {}).get(name)
        folder = os.path.dirname(self.__dict__.get("__file__", ""))
        if source is None and (
            os.path.isfile(os.path.join(folder, name + ".py")) or os.path.isfile(os.path.join(folder, name, "__init__.py"))
        ):
            source = (self.__name__, name)  # a submodule: `from package import submodule`
        if source is not None:
            module_name, attribute = source
            try:  # `from megatron.core import parallel_state`: a submodule
                value = importlib.import_module(module_name + "." + attribute)
            except ImportError:
                value = None
            if value is None or isinstance(value, StubModule) and module_name != self.__name__:
                value = getattr(importlib.import_module(module_name), attribute)
        else:
            value = StubType(name, (Stub,), {"__module__": self.__name__})
        setattr(self, name, value)
        return value


class HollowLoader(importlib.abc.Loader):
    def __init__(self, path):
        self.path = path

    def create_module(self, spec):
        module = HollowPackage(spec.name)
        module.__file__ = self.path
        module.__path__ = [os.path.dirname(self.path)]
        reexports = {}
        with open(self.path) as f:
            tree = ast.parse(f.read())
        for node in ast.walk(tree):
            if not isinstance(node, ast.ImportFrom) or node.module is None and node.level == 0:
                continue
            if node.level:
                base = spec.name.split(".")
                base = base[: len(base) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module
            for alias in node.names:
                reexports[alias.asname or alias.name] = (source, alias.name)
        module._reexports = reexports
        return module

    def exec_module(self, module):
        for name, value in VALUES.get(module.__name__, {}).items():
            setattr(module, name, value)


class Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Real megatron modules from the reference copy, stubs for everything else it imports."""

    def __init__(self, root, package="megatron"):
        self.root = root
        self.package = package

    def _real_path(self, fullname):
        if fullname.split(".")[0] != self.package or any(
            fullname == s or fullname.startswith(s + ".") for s in STUBBED
        ):
            return None
        base = os.path.join(self.root, *fullname.split("."))
        if os.path.isfile(os.path.join(base, "__init__.py")):
            return os.path.join(base, "__init__.py")
        if os.path.isfile(base + ".py"):
            return base + ".py"
        return None

    def find_spec(self, fullname, path=None, target=None):
        real = self._real_path(fullname)
        if real is not None and real.endswith("__init__.py"):
            spec = importlib.machinery.ModuleSpec(fullname, HollowLoader(real), is_package=True)
            spec.submodule_search_locations = [os.path.dirname(real)]
            return spec
        if real is not None:
            is_package = real.endswith("__init__.py")
            return importlib.util.spec_from_file_location(
                fullname,
                real,
                loader=PatchingLoader(fullname, real),
                submodule_search_locations=[os.path.dirname(real)] if is_package else None,
            )
        top = fullname.split(".")[0]
        if top in PROBES or (top != self.package and importlib.machinery.PathFinder.find_spec(top) is not None):
            return None  # the standard library, or a package installed here
        if top in STDLIB:
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec):
        module = StubModule(spec.name)
        module.__path__ = []
        for name, value in VALUES.get(spec.name, {}).items():
            setattr(module, name, value)
        return module

    def exec_module(self, module):
        parent, _, child = module.__name__.rpartition(".")
        if parent and parent in sys.modules:
            setattr(sys.modules[parent], child, module)


STDLIB = set(sys.stdlib_module_names)
# Modules the standard library probes for and expects to be missing (Jython, Windows).
PROBES = {"org", "java", "_winapi", "winreg", "nt", "msvcrt", "_winreg"}


def _patch_values():
    """Real megatron modules whose functions the checks call for a value are patched after import."""
    for module_name, values in VALUES.items():
        module = sys.modules.get(module_name)
        if module is None or isinstance(module, StubModule):
            continue
        for name, value in values.items():
            setattr(module, name, value)


def reference_folder(explicit=None, name="megatron-lm"):
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return explicit or os.environ.get("PIPESTUDIO_MEGATRON_REFERENCE") or os.path.join(root, "reference", name)


def commit_of(folder):
    path = os.path.join(folder, "COMMIT")
    if os.path.isfile(path):
        with open(path) as f:
            return f.read().strip()
    return "unknown commit"


def install(folder, package="megatron"):
    """Puts the finder in front of the import system; torch stubs answer like a CUDA build."""
    import typing

    if not hasattr(typing, "override"):  # Python < 3.12: Megatron's configs decorate with it
        typing.override = lambda f: f
    if not any(isinstance(f, Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, Finder(folder, package))
    import torch  # noqa: F401 (the stub)

    torch = sys.modules["torch"]
    torch.__version__ = "2.9.0"
    for dtype in ["float32", "float", "bfloat16", "float16", "half", "uint8", "int32", "int64"]:
        setattr(torch, dtype, dtype)
    torch.dtype = str
    torch.is_grad_enabled = lambda: True
    torch.cuda.get_device_capability = lambda *a: (9, 0)
    torch.cuda.is_available = lambda: True


def load_arguments(folder):
    install(folder)
    import megatron.training.arguments as arguments  # noqa: E402

    _patch_values()
    for name, value in VALUES["megatron.training.utils"].items():
        if hasattr(arguments, name):
            setattr(arguments, name, value)
    for name, value in VALUES["megatron.core.utils"].items():
        if hasattr(arguments, name):
            setattr(arguments, name, value)
    return arguments
