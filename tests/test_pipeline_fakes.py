"""Small fakes of the harness and of an engineer, for the pipeline's tests (no tests here).

The fakes keep the pipeline's own logic (manifests, git, resume, archive) fast to test; the
real harness runs in `test_pipeline_e2e.py`.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kopt.phases.engineers.base import EngineerRequest, Proposal

GOOD_KERNEL = '''"""A fake candidate (never run: the fake verifier reads its markers)."""
import torch.nn as nn

# fake_ms: {ms}
KOPT_TUNABLES = {{"BLOCK_ROWS": [1, 2, 4], "num_warps": [2, 4]}}
KOPT_CONFIG = {{"BLOCK_ROWS": 1, "num_warps": 4}}


class ModelNew(nn.Module):
    pass
'''
BROKEN_KERNEL = "# BROKEN: writes only half of the output\nclass ModelNew: pass\n"


@dataclass
class FakeCheck:
    name: str
    passed: bool
    detail: str = ""


@dataclass
class FakeReport:
    accepted: bool
    checks: list[FakeCheck]
    input_sets: list[str] = field(default_factory=lambda: ["smoke", "shape0"])

    def to_dict(self) -> dict[str, Any]:
        return {"accepted": self.accepted, "case": "fake", "candidate": "x", "device": "cpu",
                "checks": [{"name": c.name, "passed": c.passed, "detail": c.detail}
                           for c in self.checks]}

    def to_text(self) -> str:
        return "\n".join(f"{c.name}: {'pass' if c.passed else 'FAIL'}: {c.detail}"
                         for c in self.checks)


def fake_verify(case: Any, path: Path, **_: Any) -> FakeReport:
    text = Path(path).read_text()
    ok = "ModelNew" in text and "BROKEN" not in text
    return FakeReport(ok, [FakeCheck("loads", True, "imported"),
                           FakeCheck("every_element_written", ok,
                                     "ok" if ok else "312 of 16384 elements never written")])


def _ms_of(text: str) -> float:
    m = re.search(r"fake_ms:\s*([0-9.]+)", text)
    base = float(m.group(1)) if m else 1.0
    rows = re.search(r'KOPT_CONFIG = \{"BLOCK_ROWS": (\d+)', text) or \
        re.search(r"KOPT_CONFIG = \{'BLOCK_ROWS': (\d+)", text)
    return base / (1 + 0.1 * (int(rows.group(1)) - 1)) if rows else base


def fake_measure(case: Any, variant: Any, *, timing_label: str = "cpu-interpreter",
                 **kw: Any) -> dict[str, Any]:
    if str(variant) == "eager":
        ms = 2.0
    elif str(variant) == "compile":
        ms = 1.6
    else:
        ms = _ms_of(Path(variant).read_text())
    metrics = {"ok": True, "latency_ms": {"median": ms, "p20": ms * 0.98, "p80": ms * 1.02},
               "timing_label": timing_label, "throughput": {"gbps": None, "tflops": None},
               "peak_memory_bytes": None,
               "roofline": {"bytes": 66560, "flops": 0.0, "floor_ms": None,
                            "pct_of_floor": None, "bound": None}}
    if kw.get("profile"):
        metrics["profile"] = {"by": "cpu", "iterations": 5, "trace_file": None, "kernels": [
            {"name": "aten::native_layer_norm", "calls": 5, "total_ms": 8.0, "pct": 80.0},
            {"name": "aten::gelu", "calls": 5, "total_ms": 1.5, "pct": 15.0},
            {"name": "aten::empty", "calls": 15, "total_ms": 0.5, "pct": 5.0}]}
    return metrics


class FakeEngineer:
    """Round 1: a kernel the verifier rejects; later rounds: faster accepted kernels.

    `hang_on_round`: write `<worktree>/../hang-marker` and sleep (a test kills the process).
    """

    name = "offline"

    def __init__(self, options: dict[str, Any]) -> None:
        self.options = options
        self.requests: list[EngineerRequest] = []

    def propose(self, request: EngineerRequest, events: Any) -> Proposal:
        self.requests.append(request)
        hang = int(self.options.get("hang_on_round") or os.environ.get("KOPT_TEST_HANG") or 0)
        if request.iteration == hang:
            (request.run_dir / "hang-marker").write_text(str(os.getpid()))
            deadline = time.monotonic() + 120
            while not request.cancel.is_set() and time.monotonic() < deadline:
                time.sleep(0.05)
            return Proposal(candidate=None, notes="cancelled", cancelled=True)
        out = request.worktree / "kernels" / f"{request.case.name}.py"
        out.parent.mkdir(exist_ok=True)
        if request.iteration == 1:
            out.write_text(BROKEN_KERNEL)
        else:
            out.write_text(GOOD_KERNEL.format(ms=1.0 / request.iteration))
        return Proposal(candidate=f"kernels/{request.case.name}.py",
                        notes=f"fake round {request.iteration}",
                        unfused=[{"op": "aten::dropout", "reason": "identity in eval"}])


def fakes(engineers: list[FakeEngineer] | None = None) -> dict[str, Any]:
    """`run_pipeline(..., fakes=fakes())`; created engineers are appended to `engineers`."""

    def factory(spec: str, options: dict[str, Any]) -> FakeEngineer:
        eng = FakeEngineer(options)
        if engineers is not None:
            engineers.append(eng)
        return eng

    return {"measure": fake_measure, "verify": fake_verify, "engineer_factory": factory}


def gpu_fakes(monkeypatch: Any, engineers: list[FakeEngineer] | None = None,
              engineer: type[FakeEngineer] | None = None) -> dict[str, Any]:
    """`fakes()` with a faked GPU timer: the run's device is `cuda`, every timing is labelled
    `cuda-events`, the GPU is a "Fake H100" (nothing touches CUDA)."""
    import torch

    monkeypatch.setattr("kopt.phases.run.local_gpu_name", lambda: "Fake H100")
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *_: "Fake H100")

    def measure(case: Any, variant: Any, **kw: Any) -> dict[str, Any]:
        return fake_measure(case, variant, timing_label="cuda-events", **kw)

    def factory(spec: str, options: dict[str, Any]) -> FakeEngineer:
        eng = (engineer or FakeEngineer)(options)
        if engineers is not None:
            engineers.append(eng)
        return eng

    return {**fakes(), "measure": measure, "device": "cuda", "engineer_factory": factory}


def install() -> None:
    """Swap the harness's measure/verify and the `offline` engineer for the fakes, process-wide
    (for a `kopt` subprocess driven by `DRIVER`)."""
    import kopt.harness.bench as bench
    import kopt.harness.runner as runner
    import kopt.harness.verify as verify
    from kopt.phases.engineers.base import register_engineer

    runner.measure_variant = lambda case, variant, **kw: fake_measure(case, variant, **kw)
    verify.verify_candidate = lambda case, path, **kw: fake_verify(case, path)
    verify.verify_candidates = lambda case, paths, **kw: [fake_verify(case, p) for p in paths]

    def bench_case(case: Any, candidates: Any, **kw: Any) -> list[dict[str, Any]]:
        rows = []
        for variant in ["eager", "compile", *candidates]:
            ms = fake_measure(case, variant)["latency_ms"]["median"]
            rows.append({"variant": Path(str(variant)).stem, "median_ms": ms, "p20_ms": ms,
                         "p80_ms": ms, "gbps": None, "tflops": None, "pct_of_floor": None,
                         "verified": True, "timing_label": "cpu-interpreter", "note": ""})
        return rows

    bench.bench_case = bench_case
    # the real offline package registers itself on import (phases import it lazily): import
    # it first so that the fake's registration is the one that stays
    import kopt.phases.engineers.offline  # noqa: F401

    register_engineer("offline", FakeEngineer)


# `python -c DRIVER kopt-args...`: the real `kopt` CLI with the fakes installed.
DRIVER = (
    f"import sys; sys.path.insert(0, {str(Path(__file__).resolve().parent)!r}); import test_pipeline_fakes as f; f.install(); "
    "from kopt.workbench.cli import main; sys.exit(main(sys.argv[1:]))"
)
