"""What this machine is: Python, torch, triton, the GPU. Recorded in every metrics file."""

from __future__ import annotations

import functools
import os
import platform
import sys
from typing import Any


def describe_environment() -> dict[str, Any]:
    """Host, software versions and GPU; never an API key or any other secret."""
    import torch

    info: dict[str, Any] = {
        "host": platform.node(),
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "torch_cuda": torch.version.cuda,
        "kopt": _kopt_version(),
    }
    try:
        import triton

        info["triton"] = triton.__version__
    except Exception as err:  # triton missing or broken: say so
        info["triton"] = None
        info["triton_error"] = f"{type(err).__name__}: {err}"
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        info["gpu"] = {
            "name": props.name,
            "memory_gib": round(props.total_memory / 2**30, 1),
            "sm_count": props.multi_processor_count,
            "capability": f"{props.major}.{props.minor}",
            "count": torch.cuda.device_count(),
            "l2_cache_bytes": int(getattr(props, "L2_cache_size", 0) or 0) or None,
        }
        try:
            info["gpu"]["driver"] = _nvidia_driver()
        except Exception:  # nvidia-smi missing: the other fields still identify the GPU
            info["gpu"]["driver"] = None
    else:
        info["gpu"] = None
    info["interpret"] = os.environ.get("TRITON_INTERPRET") == "1"
    return info


def _kopt_version() -> str | None:
    try:
        from importlib.metadata import version

        return version("kopt")
    except Exception:  # running from a source tree that was never installed
        return None


@functools.lru_cache(maxsize=1)
def _nvidia_driver() -> str | None:
    import subprocess

    out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                         capture_output=True, text=True, timeout=10)
    return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None
