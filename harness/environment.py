"""What this machine is: Python, torch, triton, the GPU. Recorded in every metrics file."""

from __future__ import annotations

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
        }
    else:
        info["gpu"] = None
    info["interpret"] = os.environ.get("TRITON_INTERPRET") == "1"
    return info
