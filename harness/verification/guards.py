"""Observers installed in a worker before any candidate code is imported.

They record facts, never verdicts: which torch/clock/harness objects were replaced, which
threads and processes were left behind, which Triton kernels were launched (and on which
stream), which aten ops ran, which processes were spawned and which files were written.
The parent judges the facts (harness.verify). Uninstallable by design: the audit hook
cannot be removed, and every wrapper installed here is itself part of the identity snapshot.
"""

from __future__ import annotations

import os
import sys
import tempfile
import threading
import time
import types
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode, _get_current_dispatch_mode

# Aten ops that move, view or allocate memory but compute nothing: they never count as a
# "PyTorch compute op still running" (the Triton interpreter itself copies and re-views
# storages around each launch).
NON_COMPUTE_OPS = frozenset({
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "zeros",
    "zeros_like", "ones", "ones_like", "full", "full_like", "new_zeros", "new_ones", "new_full",
    "fill_", "zero_", "view", "_unsafe_view", "reshape", "as_strided", "t", "transpose",
    "permute", "expand", "detach", "alias", "set_", "copy_", "_to_copy", "clone", "contiguous",
    "lift_fresh", "lift_fresh_copy", "slice", "select", "unsqueeze", "squeeze", "split",
    "split_with_sizes", "chunk", "unbind", "resize_", "item", "_local_scalar_dense",
    "is_nonzero", "sym_size", "sym_stride", "sym_numel", "sym_storage_offset", "stride",
    "numel", "dim", "size", "arange", "scalar_tensor", "_to_dense", "record_stream",
    "narrow", "view_as", "expand_as", "flatten", "unflatten", "movedim", "_reshape_alias",
    "unfold",  # Tensor.unfold: a view of windows (F.unfold, which copies, is `im2col`)
    # queries that answer a Python bool from metadata (an LSTM asks cuDNN's first)
    "cudnn_is_acceptable", "is_same_size", "is_floating_point", "is_complex",
    "_has_compatible_shallow_copy_type", "_use_cudnn_rnn_flatten_weight",
    # a complex tensor seen as (..., 2) reals and back: views of one storage
    "view_as_complex", "view_as_real",
})

LIBRARY_FAMILIES: dict[str, frozenset[str]] = {
    # (_addmm_activation: addmm with cuBLASLt's ReLU or tanh-GELU epilogue)
    "gemm": frozenset({"mm", "addmm", "bmm", "baddbmm", "matmul", "linear", "addmv", "mv",
                       "dot", "_int_mm", "_addmm_activation"}),
    "convolution": frozenset({
        "convolution", "_convolution", "conv1d", "conv2d", "conv3d", "conv_transpose1d",
        "conv_transpose2d", "conv_transpose3d", "cudnn_convolution",
        "cudnn_convolution_transpose", "mkldnn_convolution", "convolution_overrideable",
        "_slow_conv2d_forward", "slow_conv3d_forward", "slow_conv_transpose2d",
        "slow_conv_transpose3d", "_nnpack_spatial_convolution"}),
    "attention": frozenset({
        "scaled_dot_product_attention", "_scaled_dot_product_attention_math",
        "_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention",
        "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_flash_attention_for_cpu",
        "_flash_attention_forward", "_efficient_attention_forward"}),
    # cuDNN's (and oneDNN's) fused recurrent layers; a GRU on the CPU has no such kernel and
    # runs as ATen's pointwise cell ops, which do count
    "recurrent": frozenset({
        "lstm", "gru", "rnn_tanh", "rnn_relu", "_cudnn_rnn", "miopen_rnn", "mkldnn_rnn_layer",
        "_thnn_fused_lstm_cell", "_thnn_fused_gru_cell"}),
    # cuFFT's (pocketfft's, MKL's) transforms: torch.fft's functions and the ops they call
    "fft": frozenset({
        "_fft_r2c", "_fft_c2r", "_fft_c2c", "fft_fft", "fft_ifft", "fft_rfft", "fft_irfft",
        "fft_fft2", "fft_ifft2", "fft_rfft2", "fft_irfft2", "fft_fftn", "fft_ifftn",
        "fft_rfftn", "fft_irfftn", "fft_hfft", "fft_ihfft", "stft", "istft"}),
}
"""Library calls (GEMM, convolution, attention, recurrent layers, FFTs): a candidate may keep a
family the baseline calls (the offline engineer generates the graph between them; `linear`
may become `mm` plus a fused bias); they are not a fallback."""
LIBRARY_OPS = frozenset().union(*LIBRARY_FAMILIES.values())


FAMILY_INTERNALS: dict[str, frozenset[str]] = {
    # oneDNN's LSTM on the CPU runs a `mkldnn_rnn_layer` per layer and stacks their final
    # states with ATen's `stack` (cuDNN returns them whole): the layer's own work
    "recurrent": frozenset({"stack"}),
}
"""Ops a library family's own implementation calls through the dispatcher, where a recorder
sees them beside the family's kernels; kept with the family when the baseline calls it (never
on their own)."""


def library_ops_of(ops: set[str]) -> frozenset[str]:
    """Every op of the library families that `ops` (a baseline's compute ops) calls, with
    what those families' implementations call (`FAMILY_INTERNALS`)."""
    return frozenset().union(*(f | FAMILY_INTERNALS.get(name, frozenset())
                               for name, f in LIBRARY_FAMILIES.items() if ops & f))


ALLOC_OPS = frozenset({"empty", "empty_like", "empty_strided", "new_empty",
                       "new_empty_strided"})

# Executables a Triton compile may legitimately spawn on a GPU machine (ptxas, the host
# C compiler for the launcher stub, ldconfig to find libcuda).
ALLOWED_SPAWNS = frozenset({"ptxas", "ptxas-blackwell", "cc", "gcc", "g++", "c++", "clang",
                            "clang++", "ldconfig", "ldconfig.real", "nvdisasm", "cuobjdump", "nvcc", "hipcc",
                            "ld.lld", "lld"})

POISON_PATTERNS: dict[str, dict[str, float]] = {
    # "a": NaN in floats; "b": a finite value no real kernel writes by accident.
    "a": {"float": float("nan"), "int": -7, "uint": 0xA5, "bool": True},
    "b": {"float": -1234.5, "int": 77, "uint": 0x5A, "bool": False},
}


def poison_value(t: torch.Tensor, pattern: str) -> float | int | bool:
    p = POISON_PATTERNS[pattern]
    if t.dtype.is_floating_point or t.dtype.is_complex:
        return p["float"]
    if t.dtype == torch.bool:
        return p["bool"]
    if t.dtype == torch.uint8:
        return p["uint"]
    return p["int"]


class OpRecorder(TorchDispatchMode):
    """Records the aten ops of a forward; fills every fresh `empty*` allocation with poison.

    Poisoning at the allocation op works on any device and allocator: memory a kernel
    leaves unwritten keeps the poison, so two runs with different patterns disagree there.
    `sink(name, elements)` is called at once for every compute op (not in `NON_COMPUTE_OPS`)
    with the most elements any of its tensors holds: in a supervised job it sends the fact
    to the supervisor as it happens, so emptying `ops` afterwards erases nothing. An op
    dispatched while a CUDA graph captures does not run then: its name is kept (it is no
    hidden op), its work is counted when the graph replays (`LaunchCounter`'s graph hooks).
    """

    def __init__(self, poison: str | None = None,
                 sink: Any = None) -> None:
        super().__init__()
        self.ops: Counter[str] = Counter()
        self.elements: Counter[str] = Counter()
        self.poison = poison
        self._sink = sink

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        name = func.overloadpacket.__name__
        captured = _capturing()
        self.ops[name] += 0 if captured else 1
        out = func(*args, **(kwargs or {}))
        if name not in NON_COMPUTE_OPS and not captured:
            n = _most_elements(args, kwargs, out)
            self.elements[name] += n
            if self._sink is not None:
                self._sink(name, n)
        if self.poison and name in ALLOC_OPS and isinstance(out, torch.Tensor) and out.numel():
            out.fill_(poison_value(out, self.poison))
        return out

    def note(self, name: str, elements: int) -> None:
        """A compute op that ran without being dispatched: one a CUDA graph captured, run again
        by its replay (`LaunchCounter`'s graph hooks)."""
        self.ops[name] += 1
        self.elements[name] += elements
        if self._sink is not None:
            self._sink(name, elements)

    def compute_ops(self) -> list[str]:
        return sorted(op for op in self.ops if op not in NON_COMPUTE_OPS)


def _capturing() -> bool:
    """Whether the current CUDA stream is capturing a graph (its work does not run now)."""
    return torch.cuda.is_initialized() and torch.cuda.is_current_stream_capturing()


class _CaptureLog(TorchDispatchMode):
    """The compute ops dispatched while a CUDA graph captures (with or without the recorder
    below it): what every replay of that graph runs again without dispatching anything."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[tuple[str, int]] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        name = func.overloadpacket.__name__
        if name not in NON_COMPUTE_OPS:
            self.ops.append((name, _most_elements(args, kwargs, out)))
        return out


def _most_elements(args: Any, kwargs: Any, out: Any) -> int:
    """The most elements held by any tensor among an op's arguments and results."""
    from torch.utils._pytree import tree_leaves

    most = 0
    for leaf in tree_leaves((args, kwargs or {}, out)):
        if isinstance(leaf, torch.Tensor):
            most = max(most, leaf.numel())
    return most


@dataclass
class Launch:
    """One Triton kernel launch seen by the harness."""

    kernel: str
    stream: int | None
    """The CUDA stream it was launched on (None on the interpreter)."""
    programs: int = 1
    """Programs (grid cells) that ran: a launch over an empty grid is never recorded."""


class LaunchCounter:
    """Counts Triton launches where a kernel really runs.

    - Interpreter: `GridExecutor.__call__` (every interpreted launch) counted with the number
      of programs the interpreter actually executed (`set_grid_idx` calls), so an empty grid
      is not a launch.
    - Compiled (GPU): Triton's own launch hook (`knobs.runtime.launch_enter_hook`), which the
      compiled kernel's launcher calls with the grid and the stream it really launches on
      (not the stream Triton's driver object says is current).
    - CUDA graphs (`torch.cuda.CUDAGraph`): a launch made while a graph captures does not run
      then and is not counted; it is logged with the graph, with the aten compute ops
      dispatched during the capture, and both are counted again at every `replay()`, on the
      stream current at the replay (a replay on a side stream is a side-stream launch), the
      ops noted into the op recorder active at the replay (`OpRecorder.note`).
    `JITFunction.run` / `InterpretedFunction.run` are wrapped too, only to name the kernel.
    The wrappers hold their state in closures, not in default arguments, and `sink(launch)`
    (a supervised job's link) receives every launch as it happens.
    """

    def __init__(self, sink: Any = None) -> None:
        self.launches: list[Launch] = []
        self._installed: list[tuple[Any, str, Any]] = []
        self._sink = sink
        self._capturing: list[tuple[str, int]] | None = None
        """Launches of the graph being captured (None while none is)."""

    def install(self) -> None:
        from triton.runtime import interpreter

        counter = self
        executor = interpreter.GridExecutor
        builder = interpreter.interpreter_builder
        original_call = executor.__call__
        original_set_idx = type(builder).set_grid_idx
        programs = [0]

        def set_grid_idx(self: Any, x: int, y: int, z: int) -> Any:
            programs[0] += 1
            return original_set_idx(self, x, y, z)

        def call(self: Any, *args: Any, **kwargs: Any) -> Any:
            before = programs[0]
            try:
                return original_call(self, *args, **kwargs)
            finally:
                ran = programs[0] - before
                if ran > 0:
                    fn = getattr(self, "fn", None)
                    counter.record(getattr(fn, "__name__", None) or "?", ran)

        import torch._dynamo

        # torch.compile around a launcher must not trace into the interpreter's numpy code.
        wrapped_call = torch._dynamo.disable(call)
        type(builder).set_grid_idx = set_grid_idx  # type: ignore[method-assign]
        executor.__call__ = wrapped_call  # type: ignore[method-assign]
        self._installed += [(type(builder), "set_grid_idx", set_grid_idx),
                            (executor, "__call__", wrapped_call)]
        if os.environ.get("TRITON_INTERPRET", "0") != "1":  # "0" is compiled kernels too
            self._install_launch_hook()
        self._install_graph_hooks()

    def _install_graph_hooks(self) -> None:
        """Wrap `torch.cuda.CUDAGraph`'s capture_begin / capture_end / replay (the methods
        `torch.cuda.graph` calls; a candidate cannot reach the C class beneath: `static`)."""
        import weakref

        from torch.utils._python_dispatch import _get_current_dispatch_mode

        cls = torch.cuda.CUDAGraph
        counter = self
        logs: weakref.WeakKeyDictionary[Any, tuple[list[tuple[str, int]],
                                                    list[tuple[str, int]]]] = (
            weakref.WeakKeyDictionary())
        capture = {"mode": None}
        begin, end, replay = cls.capture_begin, cls.capture_end, cls.replay

        def capture_begin(self: Any, *args: Any, **kwargs: Any) -> Any:
            out = begin(self, *args, **kwargs)
            counter._capturing = []
            mode = _CaptureLog()
            mode.__enter__()
            capture["mode"] = mode
            return out

        def capture_end(self: Any, *args: Any, **kwargs: Any) -> Any:
            mode, capture["mode"] = capture["mode"], None
            if mode is not None:
                mode.__exit__(None, None, None)
            launches, counter._capturing = counter._capturing or [], None
            logs[self] = (launches, mode.ops if mode is not None else [])
            return end(self, *args, **kwargs)

        def replay_(self: Any, *args: Any, **kwargs: Any) -> Any:
            out = replay(self, *args, **kwargs)
            launches, ops = logs.get(self, ([], []))
            for kernel, programs in launches:
                counter.record(kernel, programs)
            recorder = _get_current_dispatch_mode()
            if isinstance(recorder, OpRecorder):
                for name, elements in ops:
                    recorder.note(name, elements)
            return out

        for attr, fn in (("capture_begin", capture_begin), ("capture_end", capture_end),
                         ("replay", replay_)):
            setattr(cls, attr, fn)
            self._installed.append((cls, attr, fn))

    def _install_launch_hook(self) -> None:
        """Compiled kernels: wrap the driver's launcher, the call that hands the grid and the
        stream to the CUDA driver (not the stream Triton's driver object says is current)."""
        try:
            from triton.runtime.driver import driver
            launcher_cls = driver.active.launcher_cls
        except (ImportError, AttributeError, RuntimeError):
            return
        counter = self
        original = launcher_cls.__call__

        def call(self: Any, grid_x: int, grid_y: int, grid_z: int, stream: int, *args: Any,
                 **kwargs: Any) -> Any:
            programs = int(grid_x) * int(grid_y) * int(grid_z)
            if programs > 0:
                meta = args[2] if len(args) > 2 else None
                data = meta.get() if hasattr(meta, "get") else {}
                if counter._capturing is not None:  # runs when the graph replays
                    counter._capturing.append((str(data.get("name", "?")), programs))
                else:
                    counter.record(str(data.get("name", "?")), programs, int(stream))
            return original(self, grid_x, grid_y, grid_z, stream, *args, **kwargs)

        launcher_cls.__call__ = call  # type: ignore[method-assign]
        self._installed.append((launcher_cls, "__call__", call))

    def record(self, kernel: str, programs: int = 1, stream: int | None = None) -> None:
        if stream is None and torch.cuda.is_available() and torch.cuda.is_initialized():
            stream = torch.cuda.current_stream().cuda_stream
        launch = Launch(kernel, stream, programs)
        self.launches.append(launch)
        if self._sink is not None:
            self._sink(launch)

    def intact(self) -> list[str]:
        return [f"{getattr(owner, '__module__', '?')}.{getattr(owner, '__name__', owner)}.{attr}"
                for owner, attr, fn in self._installed if owner.__dict__.get(attr) is not fn]

    def take(self) -> list[Launch]:
        out, self.launches = self.launches, []
        return out


def _watched_namespaces() -> dict[str, Any]:
    """Objects whose attributes must not be replaced by a candidate."""
    import builtins

    spaces: dict[str, Any] = {
        "torch": torch, "torch.nn.functional": torch.nn.functional,
        "torch.Tensor": torch.Tensor, "torch._C.TensorBase": torch._C.TensorBase,
        "torch.nn.Module": torch.nn.Module, "torch._C": torch._C, "torch.ops.aten": None,
        "torch.cuda": torch.cuda, "torch.cuda.Event": torch.cuda.Event,
        "torch.backends.cuda.matmul": None, "time": time, "builtins": builtins, "os": os,
        "threading": threading, "torch.utils._python_dispatch": sys.modules.get(
            "torch.utils._python_dispatch"),
        # What a supervised job's link encodes and sends with (bound early anyway).
        "json": sys.modules.get("json"), "json.encoder": sys.modules.get("json.encoder"),
        "marshal": sys.modules.get("marshal"), "struct": sys.modules.get("struct"),
        "socket": sys.modules.get("socket"), "socket.socket": getattr(
            sys.modules.get("socket"), "socket", None),
    }
    # Triton's driver objects: a replaced `get_current_stream` hides launches on a side stream.
    try:
        from triton.runtime.driver import driver as triton_driver

        spaces["triton.runtime.driver.driver"] = triton_driver
        active = triton_driver.__dict__.get("_active")
        if active is not None:
            spaces["triton.runtime.driver.active"] = active
            spaces["triton.runtime.driver.active (class)"] = type(active)
    except ImportError:
        pass
    for name, mod in list(sys.modules.items()):
        # triton.language is re-pointed at interpreted versions by Triton's own interpreter
        # around every launch; the launch path itself (triton.runtime) stays watched.
        if (name.split(".")[0] in ("kopt", "triton", "safetensors") and mod is not None
                and not name.startswith("triton.language")):
            spaces[name] = mod
    return {k: v for k, v in spaces.items() if v is not None}


def _attributes(obj: Any) -> dict[str, Any]:
    try:
        return dict(vars(obj))
    except TypeError:
        return {}


@dataclass
class IdentitySnapshot:
    """Every attribute of the watched namespaces, by object identity, and `sys.modules`."""

    attributes: dict[str, dict[str, Any]] = field(default_factory=dict)
    modules: dict[str, Any] = field(default_factory=dict)
    code: dict[str, Any] = field(default_factory=dict)
    """`__code__` of every watched Python function: swapping it keeps the function's identity."""

    @classmethod
    def take(cls) -> IdentitySnapshot:
        spaces = _watched_namespaces()
        snap = cls({name: _attributes(obj) for name, obj in spaces.items()})
        snap.code = {f"{space}.{attr}": obj.__code__ for space, attrs in snap.attributes.items()
                     for attr, obj in attrs.items() if isinstance(obj, types.FunctionType)}
        snap.modules = {k: v for k, v in sys.modules.items()
                        if k.split(".")[0] in ("torch", "kopt", "triton", "time", "safetensors")}
        return snap

    def changes(self) -> list[str]:
        """Attributes replaced or deleted since the snapshot (additions are allowed: importing
        a torch submodule adds one)."""
        spaces = _watched_namespaces()
        changed: list[str] = []
        for space, before in self.attributes.items():
            now = _attributes(spaces.get(space)) if space in spaces else {}
            for attr, obj in before.items():
                if attr in ("__dict__", "__weakref__", "__doc__"):
                    continue
                if attr not in now:
                    changed.append(f"{space}.{attr} deleted")
                elif now[attr] is not obj and not _same_value(now[attr], obj):
                    new = now[attr]
                    where = getattr(new, "__module__", None) or type(new).__name__
                    changed.append(f"{space}.{attr} replaced (by {where}."
                                   f"{getattr(new, '__qualname__', '?')})")
        for space in [s for s in self.attributes if s.startswith("triton.runtime.driver")]:
            # Triton's driver objects: an attribute set on the instance shadows the class's.
            now = _attributes(spaces.get(space)) if space in spaces else {}
            changed += [f"{space}.{attr} added (shadows Triton's own)"
                        for attr in now if attr not in self.attributes[space]
                        and not attr.startswith("_")]
        for space, attrs in self.attributes.items():
            for attr, obj in attrs.items():
                code = self.code.get(f"{space}.{attr}")
                if code is not None and getattr(obj, "__code__", None) is not code:
                    changed.append(f"{space}.{attr} had its code replaced")
        for name, mod in self.modules.items():
            if sys.modules.get(name) is not mod:
                changed.append(f"sys.modules[{name!r}] replaced")
        return changed


def _same_value(a: Any, b: Any) -> bool:
    """Plain data (counters, flags, caches' ints) may change; functions, classes and modules
    may not."""
    callable_kinds = (types.FunctionType, types.BuiltinFunctionType, types.MethodType,
                      types.ModuleType, type, staticmethod, classmethod, property)
    if isinstance(a, callable_kinds) or isinstance(b, callable_kinds) or callable(a) or callable(b):
        return False
    return True


def precision_flags() -> dict[str, Any]:
    """The float32 matmul precision settings a candidate must not lower."""
    return {
        "torch.backends.cuda.matmul.allow_tf32": torch.backends.cuda.matmul.allow_tf32,
        "torch.backends.cudnn.allow_tf32": torch.backends.cudnn.allow_tf32,
        "torch.get_float32_matmul_precision": torch.get_float32_matmul_precision(),
        "torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction":
            torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction,
        "torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction":
            torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction,
    }


def set_precision(precision: str) -> None:
    tf32 = precision == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.set_float32_matmul_precision("high" if tf32 else "highest")


def child_processes() -> list[str]:
    """Live children of this process (Linux /proc; empty elsewhere), as 'pid name'."""
    me = os.getpid()
    out = []
    proc = Path("/proc")
    if not proc.is_dir():
        return out
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # "pid (comm) state ppid ..." where comm may hold spaces or parentheses.
        comm = stat[stat.find("(") + 1: stat.rfind(")")]
        rest = stat[stat.rfind(")") + 2:].split()
        if len(rest) > 1 and rest[1].isdigit() and int(rest[1]) == me and rest[0] != "Z":
            out.append(f"{entry.name} {comm}")
    return out


def _allowed_executable(exe: Any) -> bool:
    """A compiler or tool a Triton compile runs (by name, or shipped inside triton)."""
    if not isinstance(exe, (str, bytes, os.PathLike)):
        return False
    path = os.fsdecode(exe)
    name = os.path.basename(path)
    if name in ALLOWED_SPAWNS or name.endswith(("-gcc", "-g++", "-cc", "-c++", "-clang")):
        return True
    try:
        import triton

        return os.path.abspath(path).startswith(os.path.dirname(triton.__file__) + os.sep)
    except ImportError:
        return False


class AuditWatch:
    """A `sys.addaudithook` hook (cannot be removed) that records, while `armed`, every process
    spawn and every file opened for writing outside the allowed places."""

    def __init__(self, allowed_dirs: list[Path]) -> None:
        self.armed = False
        self.spawns: list[str] = []
        self.writes: list[str] = []
        home = Path.home()
        # Triton's and the CUDA driver's JIT caches, temp files, devices.
        extra = [Path(tempfile.gettempdir()), home / ".triton", home / ".cache", home / ".nv",
                 Path("/dev"), Path("/proc/self")]
        if os.environ.get("TRITON_CACHE_DIR"):
            extra.append(Path(os.environ["TRITON_CACHE_DIR"]))
        self.allowed = [str(p.resolve()) for p in allowed_dirs + extra]
        sys.addaudithook(self._hook)

    def _hook(self, event: str, args: tuple[Any, ...]) -> None:
        if not self.armed:
            return
        if event in ("subprocess.Popen", "os.posix_spawn", "os.exec", "os.spawn", "os.system",
                     "pty.spawn"):
            exe: Any = args[0] if args else None
            if exe is None and len(args) > 1:  # Popen(executable=None, args=[...])
                exe = args[1]
            if isinstance(exe, (list, tuple)):
                exe = exe[0] if exe else None
            if event == "os.system" or not _allowed_executable(exe):
                self.spawns.append(f"{event}: {str(exe)[:120]}")
        elif event in ("os.fork", "os.forkpty"):
            self.spawns.append(event)
        elif event == "open" and len(args) >= 3:
            path, mode, flags = args[0], args[1], args[2]
            writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
                isinstance(flags, int) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT))
            if writing and isinstance(path, (str, bytes, os.PathLike)):
                text = os.path.abspath(os.fsdecode(path))
                if "__pycache__" not in text and not any(
                        text == a or text.startswith(a + os.sep) for a in self.allowed):
                    self.writes.append(text)


@dataclass
class Baseline:
    """What the worker looked like just before candidate code was imported."""

    identities: IdentitySnapshot
    threads: set[int]
    children: list[str]
    precision: dict[str, Any]


def start_device(device: str, warmed: str | None = None) -> None:
    """CUDA's context (on a GPU) and a first harness Triton launch, before any snapshot;
    nothing when `warmed` says an early child (harness.jobs.early) made both already."""
    if warmed == device:
        return
    if device == "cuda":
        torch.cuda.init()
    warm_up_triton(device)


def warm_up_triton(device: str) -> None:
    """Launch a harness kernel once so Triton's lazy state (driver, caches, compiler
    paths) exists before the snapshot, and is not mistaken for the candidate's doing."""
    import triton
    import triton.language as tl

    @triton.jit
    def _harness_warmup_kernel(x_ptr, n, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1, mask=offs < n)

    x = torch.zeros(16, device=device)
    _harness_warmup_kernel[(1,)](x, 16, BLOCK=16)
    if device == "cuda":
        torch.cuda.synchronize()


def take_baseline() -> Baseline:
    import torch._dynamo  # noqa: F401  (re-wraps torch.manual_seed on first import)
    from torch._dynamo import mutation_guard

    # What torch.compile's first call patches into nn.Module (a candidate that compiles its
    # launcher did not do it): installed before the snapshot.
    mutation_guard.install_generation_tagging_init()

    return Baseline(IdentitySnapshot.take(), {t.ident or 0 for t in threading.enumerate()},
                    child_processes(), precision_flags())


def leftovers(base: Baseline, grace_s: float = 0.2) -> dict[str, list[str]]:
    """Threads and child processes started since `base` that are still running."""
    deadline = time.monotonic() + grace_s
    threads = []
    for t in threading.enumerate():
        if (t.ident or 0) not in base.threads and t.is_alive():
            t.join(timeout=max(0.0, deadline - time.monotonic()))
            if t.is_alive():
                threads.append(f"{t.name} (daemon={t.daemon})")
    children = [c for c in child_processes() if c not in base.children]
    return {"threads": threads, "processes": children}


def tampering(base: Baseline, counter: LaunchCounter, recorder: OpRecorder | None = None,
              recorder_expected: bool = False) -> list[str]:
    """What the candidate replaced, lowered or removed (empty when nothing)."""
    found = base.identities.changes()
    found += [f"{name} replaced" for name in counter.intact()]
    now = precision_flags()
    found += [f"{k} changed from {v!r} to {now[k]!r}" for k, v in base.precision.items()
              if now[k] != v]
    if recorder_expected and recorder is not None and _get_current_dispatch_mode() is not recorder:
        found.append("the harness's dispatch mode was removed from the mode stack")
    return found


def poison_free_device_memory(device: str) -> None:
    """CUDA: fill what the caching allocator holds free (and a margin) with NaN bytes, so memory
    a kernel reads without writing holds NaN rather than a previous result."""
    if device != "cuda" or not torch.cuda.is_available():
        return
    free, _total = torch.cuda.mem_get_info()
    reserved_free = torch.cuda.memory_reserved() - torch.cuda.memory_allocated()
    nbytes = int(min(max(reserved_free, 0) + free * 0.25, 8 * 2**30))
    if nbytes <= 0:
        return
    block = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    block.fill_(0xFF)  # all-ones bytes are NaN in float16/bfloat16/float32
    torch.cuda.synchronize()
    del block
