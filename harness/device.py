"""Where a case runs: `cuda`, or `cpu` through Triton's interpreter on the `smoke` inputs.

A case's `device:` (or a `--device` override) is resolved here, once, in the parent. On
`cpu` every worker runs with `TRITON_INTERPRET=1` (request key `"interpret": true`), uses
the case's `smoke` input set, and its timings carry the label `cpu-interpreter`: they are
never presented as GPU figures.
"""

from __future__ import annotations

from kopt.harness.case import Case
from kopt.harness.errors import DeviceError

DEVICES = ("cuda", "cpu", "auto")
GPU_TIMING_LABEL = "cuda-events"
CPU_TIMING_LABEL = "cpu-interpreter"


def gpu_available() -> bool:
    """True when torch sees at least one CUDA device.

    Asked of NVML first (the driver's management library, as PyTorch does under
    `PYTORCH_NVML_BASED_CUDA_CHECK=1`, honouring `CUDA_VISIBLE_DEVICES`): CUDA's own start in
    this process took 0.31 s of a 6.1 s `kopt verify` on an H200 (2026-11-28), and the
    workers start CUDA themselves. Only a CUDA build of torch counts; where NVML is missing
    or sees nothing, CUDA's own answer."""
    import torch

    count = getattr(torch.cuda, "_device_count_nvml", None)
    if torch.version.cuda is not None and count is not None:
        try:
            if count() > 0:
                return True
        except Exception:  # noqa: BLE001 - NVML's answer is a shortcut, never required
            pass
    return bool(torch.cuda.is_available())


def resolve_device(case: Case | None, override: str | None = None) -> str:
    """`cuda` or `cpu` for `case` (its `device:`), or for `override` when one is given.

    `auto` picks `cuda` when a GPU is visible. Asking for `cuda` on a machine without one
    raises `DeviceError` naming the fix.
    """
    wanted = override or (case.manifest.device if case is not None else "auto")
    if wanted not in DEVICES:
        raise DeviceError(f"unknown device {wanted!r}",
                          fix=f"expected one of {', '.join(map(repr, DEVICES))}")
    if wanted == "auto":
        return "cuda" if gpu_available() else "cpu"
    if wanted == "cuda" and not gpu_available():
        where = ("--device cuda" if override else
                 f"{case.manifest_file}: device: cuda" if case is not None else "device cuda")
        raise DeviceError(f"{where} asks for a GPU but torch sees no CUDA device",
                          fix="run on a machine with a GPU, or use --device cpu "
                              "(or `device: auto` in the manifest) for the Triton interpreter")
    return wanted


def is_interpreter(device: str) -> bool:
    """Do Triton kernels run under the CPU interpreter (`TRITON_INTERPRET=1`) here?"""
    return device == "cpu"


def timing_label(device: str) -> str:
    """`cuda-events` for GPU timings, `cpu-interpreter` for anything measured on the CPU."""
    return GPU_TIMING_LABEL if device == "cuda" else CPU_TIMING_LABEL


def default_input_set(case: Case, device: str) -> str:
    """`main` on a GPU; `smoke` on the CPU interpreter (when the case declares one)."""
    if device == "cuda" or case.manifest.smoke is None:
        return "main"
    return "smoke"


def worker_env(device: str) -> dict[str, str]:
    """Environment a worker needs for `device` (the interpreter switch on the CPU)."""
    return {"TRITON_INTERPRET": "1"} if is_interpreter(device) else {}
