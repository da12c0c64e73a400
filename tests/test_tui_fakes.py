"""A small fake `Backend` for the TUI tests: fixed data, no git, no torch, no timestamps.

It behaves like the real calls in what the UI relies on: the pipeline streams phase and
iteration events (honouring cancel), a rejection's reason reaches the next iteration as
feedback, approve/reject/undo change the run's approval, diffs compare iteration sources,
verification can be slow.
"""

from __future__ import annotations

import difflib
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kopt.phases import events as ev
from kopt.workbench.backend import (
    PHASES,
    Backend,
    CaseRow,
    IterationDetail,
    ManifestView,
    RunOutcome,
    RunRequest,
    case_row,
)

CHECKS = ("loads", "correct", "finite", "isolated_reference", "no_tampering",
          "every_element_written", "depends_on_inputs", "no_mutation", "no_aliasing",
          "triton_launched", "no_pytorch_fallback", "contained")

KERNEL_V1 = '''import torch
import triton
import triton.language as tl


@triton.jit
def _layernorm_gelu_kernel(X_ptr, Y_ptr, N, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    x = tl.load(X_ptr + row * N + cols, mask=cols < N, other=0.0)
    mean = tl.sum(x, axis=0) / N
    tl.store(Y_ptr + row * N + cols, x - mean, mask=cols < N)
'''


def kernel_source(n: int, note: str = "") -> str:
    """The n-th iteration's kernel: each iteration changes a line, so diffs are non-empty."""
    lines = KERNEL_V1.splitlines()
    lines[-1] = f"    tl.store(Y_ptr + row * N + cols, (x - mean) * {n}.0, mask=cols < N)"
    if note:
        lines.insert(5, f"# feedback applied: {note}")
    return "\n".join(lines) + "\n"


@dataclass
class FakeIteration:
    """Same fields as phases.history.IterationInfo."""

    commit: str
    iteration: int
    phase: str
    author: str
    speedup: float | None
    pct_of_floor: float | None
    verified: bool
    message: str
    candidate: str
    source: str = ""


@dataclass
class FakeRun:
    """Same fields as phases.history.RunInfo."""

    run_id: str
    case: str
    branch: str
    worktree: str
    iterations: list[FakeIteration] = field(default_factory=list)
    approval: dict[str, Any] | None = None
    decisions: list[dict[str, Any] | None] = field(default_factory=list)
    feedback: str | None = None

    @property
    def best_speedup(self) -> float | None:
        speeds = [i.speedup for i in self.iterations if i.verified and i.speedup]
        return max(speeds) if speeds else None


class FakeBackend(Backend):
    """Fixed cases and runs; a pipeline that emits events with short pauses."""

    def __init__(self, root: Path, *, phase_delay: float = 0.02, verify_delay: float = 0.0,
                 seeded_runs: bool = True) -> None:
        self.root = root
        self.phase_delay = phase_delay
        self.verify_delay = verify_delay
        self.runs_by_id: dict[str, FakeRun] = {}
        self.requests: list[RunRequest] = []
        self.verify_calls: list[Path] = []
        self.verify_sources: list[str] = []
        """What each verified file held when it was verified (an edit is verified as a copy)."""
        self.bench_calls: list[Path] = []
        self.bench_verified: list[bool] = []
        """Per bench call: whether the caller said it had just verified those bytes."""
        self.feedback_seen: list[str | None] = []
        self.commits = 0
        self.clock = 1000.0
        self.verify_gate: threading.Event | None = None
        """When set, verify waits for it (up to 20 s): a verification that runs until released."""
        self.gate: threading.Semaphore | None = None
        """When set, each phase waits for one release after it started (tests step phases)."""
        self.lock = threading.Lock()
        if seeded_runs:
            self._seed()

    # -- fixtures ----------------------------------------------------------------------

    def _new_run(self, case: str) -> FakeRun:
        run_id = f"run{len(self.runs_by_id) + 1:02d}"
        worktree = self.root / "worktrees" / run_id
        (worktree / "kernels").mkdir(parents=True, exist_ok=True)
        run = FakeRun(run_id, case, f"kopt/{case}/{run_id}", str(worktree))
        self.runs_by_id[run_id] = run
        return run

    def _commit(self, run: FakeRun, *, author: str, speedup: float | None, verified: bool,
                source: str, phase: str = "optimizer", message: str = "") -> FakeIteration:
        self.commits += 1
        commit = f"{self.commits:02d}" + "c0ffee" * 6 + "ab"
        it = FakeIteration(commit, len(run.iterations) + 1, phase, author, speedup,
                           round(speedup * 20.0, 1) if speedup else None, verified,
                           message, f"kernels/{run.case}.py", source)
        run.iterations.append(it)
        (Path(run.worktree) / "kernels" / f"{run.case}.py").write_text(source)
        return it

    def _seed(self) -> None:
        run = self._new_run("layernorm_gelu")
        self._commit(run, author="offline", speedup=1.8, verified=True, source=kernel_source(1))
        self._commit(run, author="offline", speedup=None, verified=False,
                     source=kernel_source(2))
        self._commit(run, author="offline", speedup=2.4, verified=True, source=kernel_source(3))
        run.approval = {"state": "approved", "commit": run.iterations[2].commit}
        other = self._new_run("softmax_row")
        self._commit(other, author="anthropic", speedup=3.1, verified=True,
                     source=kernel_source(7))

    # -- Backend -----------------------------------------------------------------------

    def workspace_problem(self) -> str | None:
        return None

    def cases(self) -> list[CaseRow]:
        described = [("layernorm_gelu", "LayerNorm then exact GELU over a bf16 activation"),
                     ("softmax_row", "Row softmax over (4096, 8192) fp32"),
                     ("rmsnorm_mul", "RMSNorm times a gate")]
        rows = [case_row(name, text, self.runs(name)) for name, text in described]
        rows.append(CaseRow(name="broken_case", description="manifest.yaml: inputs: missing",
                            verdict="invalid", source="user"))
        return rows

    def runs(self, case: str | None = None) -> list[Any]:
        with self.lock:
            return [r for r in self.runs_by_id.values() if case is None or r.case == case]

    def _emit(self, events: Any, kind: str, phase: str = "", message: str = "",
              data: dict[str, Any] | None = None) -> None:
        self.clock += 1.5
        events(ev.Event(kind, phase, message, dict(data or {}), time=self.clock))

    def run_pipeline(self, request: RunRequest, *, events: Any,
                     cancel: threading.Event) -> RunOutcome:
        self.requests.append(request)
        with self.lock:
            if request.run_id:
                run = self.runs_by_id[request.run_id]
            else:
                # Like phases.optimizer.previous_rejection: the latest earlier run's reason.
                earlier = [r for r in self.runs_by_id.values() if r.case == request.case]
                run = self._new_run(request.case)
                if earlier and earlier[-1].approval and \
                        earlier[-1].approval.get("state") == "rejected":
                    run.feedback = earlier[-1].approval["reason"]
        for phase in request.phases or list(PHASES):
            if cancel.is_set():
                return RunOutcome(run.run_id, "cancelled")
            self._emit(events, ev.PHASE_STARTED, phase, data={"run_id": run.run_id})
            if self.gate is not None and not self.gate.acquire(timeout=20):
                raise TimeoutError("the test never released the phase gate")
            self._emit(events, ev.LOG, phase, f"{phase} working on {request.case}")
            time.sleep(self.phase_delay)
            if phase == "optimizer":
                for _ in range(request.iterations):
                    if cancel.is_set():
                        break
                    feedback = run.feedback
                    self.feedback_seen.append(feedback)
                    self._emit(events, ev.TEXT_DELTA, phase, "fusing layernorm ")
                    self._emit(events, ev.TEXT_DELTA, phase, "and gelu\n")
                    self._emit(events, ev.TOOL_CALL, phase,
                               data={"name": "verify", "input": {"path": "kernels/x.py"}})
                    with self.lock:
                        number = len(run.iterations) + 1
                        it = self._commit(run, author=request.engineer,
                                          speedup=1.0 + 0.5 * number, verified=True,
                                          source=kernel_source(number, feedback or ""),
                                          message=f"feedback: {feedback}" if feedback else "")
                    self._emit(events, ev.ITERATION, phase, data={
                        "iteration": it.iteration, "commit": it.commit, "author": it.author,
                        "speedup": it.speedup, "pct_of_floor": it.pct_of_floor,
                        "verdict": "verified", "candidate": it.candidate})
                    time.sleep(self.phase_delay)
            self._emit(events, ev.PHASE_FINISHED, phase, data={"status": "verified"})
        return RunOutcome(run.run_id, "cancelled" if cancel.is_set() else "verified")

    def approve(self, run_id: str, commit: str | None) -> None:
        run = self.runs_by_id[run_id]
        run.decisions.append(run.approval)
        run.approval = {"state": "approved", "commit": commit}

    def reject(self, run_id: str, commit: str | None, reason: str) -> None:
        run = self.runs_by_id[run_id]
        run.decisions.append(run.approval)
        run.approval = {"state": "rejected", "commit": commit, "reason": reason}

    def undo(self, run_id: str) -> None:
        run = self.runs_by_id[run_id]
        run.approval = run.decisions.pop() if run.decisions else None

    def _find(self, commit: str) -> tuple[FakeRun, int]:
        for run in self.runs_by_id.values():
            for i, it in enumerate(run.iterations):
                if it.commit == commit:
                    return run, i
        raise KeyError(commit)

    @staticmethod
    def _unified(old: str, new: str, old_name: str, new_name: str) -> str:
        return "".join(difflib.unified_diff(old.splitlines(True), new.splitlines(True),
                                            f"a/{old_name}", f"b/{new_name}"))

    def diff(self, run_id: str, a: str | None, b: str | None) -> str:
        """Like phases.history.diff: `a` None is the iteration before `b`."""
        run, i = self._find(b or self.runs_by_id[run_id].iterations[-1].commit)
        new = run.iterations[i]
        if a is None:
            old = run.iterations[i - 1] if i else None
        else:
            old = run.iterations[self._find(a)[1]]
        return self._unified(old.source if old else "", new.source,
                             old.commit[:8] if old else "empty", new.commit[:8])

    def kernel_source(self, run: Any, commit: str) -> str:
        """Like the real call: the kernel as the iteration committed it."""
        found, i = self._find(commit)
        return found.iterations[i].source

    def diff_across(self, run_a: Any, a: str, run_b: Any, b: str) -> str:
        old = run_a.iterations[self._find(a)[1]]
        new = run_b.iterations[self._find(b)[1]]
        return self._unified(old.source, new.source, old.commit[:8], new.commit[:8])

    def ensure_worktree(self, run: Any) -> Path:
        return Path(run.worktree)

    def iteration_detail(self, run: Any, iteration: Any) -> IterationDetail:
        return IterationDetail(verification=self._report(iteration.verified, iteration.candidate),
                               metrics=None)

    def _report(self, accepted: bool, candidate: str) -> dict[str, Any]:
        checks = [{"name": name, "passed": accepted or name != "correct",
                   "detail": "ok" if accepted or name != "correct" else
                   "312 of 16384 elements differ; first at (0, 5): 0.51 vs 0.49"}
                  for name in CHECKS]
        return {"accepted": accepted, "case": "layernorm_gelu", "candidate": candidate,
                "device": "cpu-interpreter", "checks": checks}

    def manifests(self, run_id: str) -> list[ManifestView]:
        run = self.runs_by_id[run_id]
        architect = {"schema": "kopt.manifest/v1", "phase": "architect", "run_id": run_id,
                     "case": run.case, "status": "verified",
                     "benchmarks": {"baseline_ms": 1.29},
                     "details": {"profile": {"top_kernels": [
                         {"name": "vectorized_layer_norm_kernel", "device_ms": 0.61},
                         {"name": "gelu_kernel", "device_ms": 0.42},
                         {"name": "elementwise_copy", "device_ms": 0.11}]}}}
        return [ManifestView("architect", architect, True)]

    def verify(self, case: str, candidate: Path) -> dict[str, Any]:
        self.verify_calls.append(candidate)
        self.verify_sources.append(candidate.read_text())
        time.sleep(self.verify_delay)
        if self.verify_gate is not None:
            self.verify_gate.wait(20)
        return self._report("BROKEN" not in candidate.read_text(), str(candidate.name))

    def bench(self, case: str, candidate: Path, *, verified: bool = False) -> list[dict[str, Any]]:
        self.bench_calls.append(candidate)
        self.bench_verified.append(verified)
        return [{"variant": "eager", "median_ms": 1.29, "p20_ms": 1.28, "p80_ms": 1.31,
                 "pct_of_floor": 7.0, "speedup_vs_eager": 1.0, "speedup_vs_compile": 0.8,
                 "verified": True, "timing_label": "cpu-interpreter"},
                {"variant": candidate.name, "median_ms": 0.43, "p20_ms": 0.42,
                 "p80_ms": 0.44, "pct_of_floor": 21.0, "speedup_vs_eager": 3.0,
                 "speedup_vs_compile": 2.4, "verified": True,
                 "timing_label": "cpu-interpreter"}]

    def import_kernelbench(self, path: Path, name: str | None = None) -> str:
        return name or path.stem

    def commit_user_edit(self, run: Any, candidate: Path, report: dict[str, Any] | None,
                         bench: list[dict[str, Any]] | None) -> str:
        with self.lock:
            it = self._commit(self.runs_by_id[run.run_id], author="user", speedup=3.0,
                              verified=True, source=candidate.read_text())
        return it.commit


async def wait_for(pilot: Any, condition: Any, timeout: float = 30.0) -> None:
    """Let the app run until `condition()` holds (fails the test after `timeout`)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for the UI")
        await pilot.pause(0.02)
