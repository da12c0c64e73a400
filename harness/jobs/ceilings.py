"""`ceilings`: the target's measured peak rates (copy GB/s, matmul TFLOP/s) for `kopt targets`."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def run(job_dir: Path, request: dict[str, Any]) -> dict[str, Any]:
    import torch

    from kopt.harness.environment import describe_environment
    from kopt.harness.roofline import ceilings

    device = "cuda" if torch.cuda.is_available() else "cpu"
    measured = ceilings(device, refresh=bool(request.get("refresh")))
    print(f"ceilings: {measured.device_name}: copy {measured.copy_gbps} GB/s, "
          f"bf16 {measured.bf16_tflops} TFLOP/s", flush=True)
    return {"ok": True, "ceilings": measured.to_dict(), "environment": describe_environment()}
