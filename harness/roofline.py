"""The roofline floor of a case: bytes that must move, FLOPs, and the GPU's measured ceilings.

Bytes: each input tensor and each weight (state_dict entry) read once, each output written
once -- the traffic of a perfectly fused kernel. FLOPs: the case's `flops:` field (main
inputs), else torch's FlopCounterMode (it counts matmul/conv/attention FLOPs; pointwise and
reductions count 0, so such cases are memory-bound by construction). Both are computed on
the `meta` device (no data, no time), falling back to a real CPU forward when a model
cannot run on `meta`.

Ceilings are measured once per GPU (device-to-device copy bandwidth counting read + write;
bf16, fp16, tf32 and fp32 matmul rates) and cached in `.kopt/cache/ceilings/<gpu>.json`.
On the CPU there are no ceilings: bytes and FLOPs are reported, the floor is null, and
nothing is ever presented as a GPU figure.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch.utils._pytree import tree_leaves

from kopt.harness.case import Case, TensorSpec
from kopt.harness.data import TORCH_DTYPES, instantiate, model_class
from kopt.harness.paths import cache_dir

# Ceiling measurement sizes: 512 MiB copies and 8192^3 matmuls saturate an H100/H200
# (smaller sizes read 10-20% low); each figure is the median of the timer's samples.
COPY_BYTES = 512 * 2**20
MATMUL_N = 8192
CEILINGS_VERSION = 1


@dataclass(frozen=True)
class Cost:
    """What one forward must do at minimum."""

    bytes: int
    """Inputs and weights read once, outputs written once."""
    flops: float
    """Floating-point operations (matmul-like ops; see module docstring)."""
    flops_source: str = "counter"
    """`manifest` (the case's `flops:`), `counter` (FlopCounterMode) or `unavailable`."""
    input_bytes: int = 0
    weight_bytes: int = 0
    output_bytes: int = 0


@dataclass(frozen=True)
class Ceilings:
    """Peak rates of one device. None where not measured (always None on the CPU)."""

    copy_gbps: float | None
    """Device-to-device copy bandwidth, GB/s, counting read + write."""
    bf16_tflops: float | None
    fp16_tflops: float | None
    tf32_tflops: float | None
    """float32 matmul with TF32 tensor cores allowed."""
    fp32_tflops: float | None
    """float32 matmul in strict IEEE fp32."""
    device_name: str = "cpu"
    source: str = "none"
    """`measured` (on this GPU, cached), or `none` (CPU: no floor is claimed)."""
    measured_at: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# -- cost -------------------------------------------------------------------------------------

def _tensor_bytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def _meta_inputs(case: Case, input_set: str) -> tuple[list[Any], dict[str, Any]]:
    resolved = case.input_set(input_set)

    def make(spec: Any) -> Any:
        if not isinstance(spec, TensorSpec):
            return spec.value
        shape = list(spec.shape)
        if not spec.contiguous and len(shape) >= 2:
            shape[-1], shape[-2] = shape[-2], shape[-1]
            return torch.empty(shape, dtype=TORCH_DTYPES[spec.dtype], device="meta").transpose(-1, -2)
        return torch.empty(shape, dtype=TORCH_DTYPES[spec.dtype], device="meta")

    return [make(a) for a in resolved.args], {k: make(v) for k, v in resolved.kwargs.items()}


def _sdpa_flops(query_shape: Any, key_shape: Any, value_shape: Any, *args: Any,
                out_shape: Any = None, **kwargs: Any) -> int:
    """Attention FLOPs (QK^T and PV), grouped-query attention included: key and value may have
    fewer heads than the query (older torch's own formula refuses that)."""
    b, h_q, s_q, d = query_shape[0], query_shape[-3], query_shape[-2], query_shape[-1]
    s_k, d_v = key_shape[-2], value_shape[-1]
    return 2 * b * h_q * s_q * s_k * d + 2 * b * h_q * s_q * s_k * d_v


@contextmanager
def flop_counter() -> Iterator[Any]:
    """torch's FlopCounterMode (matmul, convolution, attention FLOPs), held: an attention
    formula that holds for grouped-query attention on every torch version, and each recurrent
    layer one op with one formula (`harness.recurrent_ops`; a cell a step otherwise)."""
    from torch.utils.flop_counter import FlopCounterMode

    from kopt.harness.recurrent_ops import recurrent_flop_mapping, whole_recurrent_layers

    aten = torch.ops.aten
    ops = [getattr(aten, n) for n in ("_scaled_dot_product_efficient_attention",
                                      "_scaled_dot_product_flash_attention",
                                      "_scaled_dot_product_cudnn_attention",
                                      "_scaled_dot_product_flash_attention_for_cpu")
           if hasattr(aten, n)]
    mapping = {**{op: _sdpa_flops for op in ops}, **recurrent_flop_mapping()}
    with whole_recurrent_layers(), FlopCounterMode(display=False, custom_mapping=mapping) as counter:
        yield counter


def _count(model: torch.nn.Module, args: list[Any], kwargs: dict[str, Any]) -> tuple[Any, float]:
    with torch.no_grad(), flop_counter() as counter:
        out = model(*args, **kwargs)
    return out, float(counter.get_total_flops())


def case_cost(case: Case, input_set: str = "main") -> Cost:
    """Bytes that must move and FLOPs of one forward of `case` on `input_set`."""
    resolved = case.input_set(input_set)
    cls = model_class(case)
    try:
        with torch.device("meta"):
            model = instantiate(cls, resolved, case.model_file)
        args, kwargs = _meta_inputs(case, input_set)
        out, flops = _count(model, args, kwargs)
    except Exception:  # data-dependent model (e.g. .item()): run it for real on the CPU
        from kopt.harness.data import agent_provide_inputs, build_model

        model = build_model(case, input_set)
        inputs = agent_provide_inputs(case, input_set)
        args, kwargs = inputs.args, inputs.kwargs
        out, flops = _count(model, args, kwargs)

    seen: set[int] = set()

    def unique_bytes(tensors: list[torch.Tensor]) -> int:
        total = 0
        for t in tensors:  # a tensor named twice (tied weights) moves once
            key = id(t) if t.device.type == "meta" else t.data_ptr()
            if key not in seen:
                seen.add(key)
                total += _tensor_bytes(t)
        return total

    input_bytes = unique_bytes([t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)])
    weight_bytes = unique_bytes(list(model.state_dict(keep_vars=True).values()))
    output_bytes = sum(_tensor_bytes(t) for t in tree_leaves(out) if isinstance(t, torch.Tensor))
    source = "counter"
    if case.manifest.flops is not None and input_set == "main":
        flops, source = float(case.manifest.flops), "manifest"
    return Cost(bytes=input_bytes + weight_bytes + output_bytes, flops=flops,
                flops_source=source, input_bytes=input_bytes, weight_bytes=weight_bytes,
                output_bytes=output_bytes)


_WINDOWS: dict[tuple[str, str], dict[str, float]] = {}


def timing_window(case: Case, input_set: str) -> dict[str, float]:
    """The GPU timer's window for `case` (timing options; {} keeps the timer's defaults).

    The defaults stretch to a 2 s warm-up and a 3 s window for calls of 0.5 ms or more, for
    compute-bound products whose clock settles under load (harness.timing). A case that does
    no matmul-like work (0 FLOPs counted) gets the short window at any call length: memory-bound
    medians spread 0.24% or less across five runs with it (H100, 2026-11-22), and the long one
    cost a 1 ms eager RMSNorm 5.5 s per timing (H100, 2026-11-27). Computed in the parent, so
    nothing a candidate does chooses its own window; once per case and input set."""
    from kopt.harness.timing import GPU_MIN_SECONDS, GPU_WARMUP_SECONDS

    key = (str(case.directory), input_set)
    if key not in _WINDOWS:
        flops: float | None = None
        if case.manifest.flops is not None and input_set == "main":
            flops = float(case.manifest.flops)
        else:  # on the meta device only: never a real forward of a GPU-sized model here
            try:
                resolved = case.input_set(input_set)
                with torch.device("meta"):
                    model = instantiate(model_class(case), resolved, case.model_file)
                args, kwargs = _meta_inputs(case, input_set)
                flops = _count(model, args, kwargs)[1]
            except Exception:  # noqa: BLE001 (no count: the timer's defaults)
                flops = None
        _WINDOWS[key] = ({"min_seconds": GPU_MIN_SECONDS, "warmup_seconds": GPU_WARMUP_SECONDS}
                         if flops == 0 else {})
    return dict(_WINDOWS[key])


def case_dtype(case: Case, input_set: str = "main") -> str:
    """The dtype that sets the compute ceiling: the largest floating-point input's."""
    specs = [s for s in case.input_set(input_set).tensor_specs()
             if TORCH_DTYPES[s.dtype].is_floating_point]
    if not specs:
        return "float32"
    return max(specs, key=lambda s: _numel(s.shape)).dtype


def _numel(shape: list[int]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


# -- ceilings ---------------------------------------------------------------------------------

def _ceilings_file(name: str) -> Path:
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_") or "gpu"
    return cache_dir() / "ceilings" / f"{safe}.json"


def _cached(file: Path) -> Ceilings | None:
    if not file.is_file():
        return None
    try:
        data = json.loads(file.read_text())
        if data.pop("version", None) == CEILINGS_VERSION:
            return Ceilings(**data)
    except (OSError, ValueError, TypeError):
        pass  # unreadable or from an older kopt: measure again
    return None


def ceilings(device: str = "cuda", *, refresh: bool = False) -> Ceilings:
    """The device's peak rates: measured once per GPU and cached; all None on the CPU.

    One process measures at a time (a lock file beside the cache): the others wait and read
    what it wrote. A GPU suite starts several problems at once, and each one's first timing
    job measured the same GPU again, 6-21 s each at the GPU gate (4x H200, 2026-11-28: twelve
    measurements in a call of four GPUs, 166 s of timing jobs)."""
    if not str(device).startswith("cuda"):
        return Ceilings(None, None, None, None, None, device_name="cpu", source="none")
    name = torch.cuda.get_device_name()
    file = _ceilings_file(name)
    if not refresh and (known := _cached(file)) is not None:
        return known
    file.parent.mkdir(parents=True, exist_ok=True)
    with _measuring(file):
        if not refresh and (known := _cached(file)) is not None:
            return known  # measured by another process while this one waited
        measured = measure_ceilings()
        tmp = file.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"version": CEILINGS_VERSION, **measured.to_dict()}, indent=1))
        tmp.replace(file)
    return measured


@contextmanager
def _measuring(file: Path) -> Iterator[None]:
    """Hold `file`'s lock (an exclusive `flock` on `<file>.lock`) for the block; on a system
    or filesystem without locks, no lock (two measurements then, as before)."""
    try:
        import fcntl

        handle = open(file.with_suffix(".lock"), "a")  # noqa: SIM115 (held for the block)
    except (ImportError, OSError):
        yield
        return
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX)
        except OSError:
            pass
        yield
    finally:
        handle.close()  # releases the lock


def measure_ceilings() -> Ceilings:
    """Measure this GPU's copy bandwidth and matmul rates (about 5 s)."""
    from kopt.harness import gpu_gate
    from kopt.harness.timing import time_callable

    def timed(fn: Any) -> float:
        # Short windows: a peak rate is what the GPU does before its power limit pulls the
        # clock down, and a higher ceiling only lowers every % of floor. The timer's long-call
        # defaults (2 s warm-up, 3 s window: for figures that are compared) made this 21 s on
        # an H100 (2026-11-27, the first measure job of a fresh machine); now about 5 s.
        with gpu_gate.timing_window():
            return time_callable(fn, device="cuda", flush_l2=False, min_iters=10,
                                 max_iters=100, max_seconds=1.0, min_seconds=0.3,
                                 warmup_seconds=0.5).median_ms

    def copy_ms() -> float:
        src = torch.empty(COPY_BYTES // 4, dtype=torch.float32, device="cuda").normal_()
        dst = torch.empty_like(src)
        return timed(lambda: dst.copy_(src))

    copy_gbps = 2 * COPY_BYTES / (copy_ms() * 1e-3) / 1e9

    flops = 2.0 * MATMUL_N**3
    rates: dict[str, float] = {}
    old_tf32 = torch.backends.cuda.matmul.allow_tf32
    try:
        for key, dtype, tf32 in (("bf16", torch.bfloat16, False), ("fp16", torch.float16, False),
                                 ("tf32", torch.float32, True), ("fp32", torch.float32, False)):
            torch.backends.cuda.matmul.allow_tf32 = tf32
            rates[key] = flops / (_matmul_ms(dtype, timed) * 1e-3) / 1e12
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old_tf32
    torch.cuda.empty_cache()
    return Ceilings(copy_gbps=round(copy_gbps, 1), bf16_tflops=round(rates["bf16"], 1),
                    fp16_tflops=round(rates["fp16"], 1), tf32_tflops=round(rates["tf32"], 1),
                    fp32_tflops=round(rates["fp32"], 1), device_name=torch.cuda.get_device_name(),
                    source="measured", measured_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"))


def _matmul_ms(dtype: torch.dtype, timed: Any) -> float:
    a = torch.randn(MATMUL_N, MATMUL_N, device="cuda", dtype=dtype)
    b = torch.randn(MATMUL_N, MATMUL_N, device="cuda", dtype=dtype)
    out = torch.empty(MATMUL_N, MATMUL_N, device="cuda", dtype=dtype)
    return timed(lambda: torch.mm(a, b, out=out))


# -- floor ------------------------------------------------------------------------------------

def compute_tflops(ceil: Ceilings, dtype: str, precision: str = "strict") -> float | None:
    """The matmul rate that bounds `dtype` compute under the case's `precision`."""
    if dtype == "bfloat16":
        return ceil.bf16_tflops
    if dtype == "float16":
        return ceil.fp16_tflops
    if dtype == "float32" and precision == "tf32":
        return ceil.tf32_tflops
    return ceil.fp32_tflops  # float32 strict; float64/int are no faster than fp32


def floor_parts(cost: Cost, ceil: Ceilings, dtype: str,
                precision: str = "strict") -> tuple[float | None, float | None]:
    """(memory ms, compute ms) at the ceilings; None where a ceiling is unknown."""
    mem = cost.bytes / (ceil.copy_gbps * 1e9) * 1e3 if ceil.copy_gbps else None
    rate = compute_tflops(ceil, dtype, precision)
    comp = cost.flops / (rate * 1e12) * 1e3 if rate else None
    return mem, comp


def floor_ms(cost: Cost, ceilings: Ceilings, dtype: str,
             precision: str = "strict") -> float | None:
    """The roofline floor: max(bytes / copy bandwidth, FLOPs / matmul rate). None on the CPU."""
    mem, comp = floor_parts(cost, ceilings, dtype, precision)
    if mem is None:
        return None
    return max(mem, comp or 0.0)


def bound(cost: Cost, ceilings: Ceilings, dtype: str, precision: str = "strict") -> str | None:
    """`memory` or `compute`: which ceiling sets the floor (None without ceilings)."""
    mem, comp = floor_parts(cost, ceilings, dtype, precision)
    if mem is None:
        return None
    return "compute" if (comp or 0.0) > mem else "memory"


def pct_of_floor(floor: float | None, median_ms: float) -> float | None:
    """floor_ms / median_ms x 100: how close a variant is to the floor (100 = at it)."""
    if floor is None or median_ms <= 0:
        return None
    return floor / median_ms * 100.0


def throughput(cost: Cost, median_ms: float) -> dict[str, float | None]:
    """Achieved GB/s and TFLOP/s of a variant at `median_ms`."""
    if median_ms <= 0:
        return {"gbps": None, "tflops": None}
    s = median_ms * 1e-3
    return {"gbps": cost.bytes / s / 1e9, "tflops": cost.flops / s / 1e12}


def roofline_summary(case: Case, input_set: str, device: str, median_ms: float) -> dict[str, Any]:
    """metrics.json's `roofline` object for a variant timed at `median_ms`."""
    cost = case_cost(case, input_set)
    ceil = ceilings(device)
    dtype = case_dtype(case, input_set)
    precision = case.manifest.precision
    floor = floor_ms(cost, ceil, dtype, precision)
    return {"bytes": cost.bytes, "flops": cost.flops, "flops_source": cost.flops_source,
            "floor_ms": floor, "pct_of_floor": pct_of_floor(floor, median_ms),
            "bound": bound(cost, ceil, dtype, precision), "dtype": dtype,
            "ceilings": ceil.to_dict()}
