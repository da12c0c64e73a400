"""The `verification_tool`: is a candidate correct, honest and self-contained?

The parent draws fresh seeds (never visible to the candidate), stages input tensors, runs the
candidate in one worker (`harness.jobs.candidate`) and, after that worker has exited, the
baseline in another (`harness.jobs.reference`), so that the reference does not exist anywhere
while candidate code runs. Every verdict is computed here from raw tensors under the jobs'
`out/` and from facts recorded by harness code in the worker; nothing the candidate prints or
writes counts. Check names are stable identifiers (ARCHITECTURE.md).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file

from kopt.harness.case import Case, load_case
from kopt.harness.compare import compare_outputs
from kopt.harness.device import resolve_device, worker_env
from kopt.harness.errors import BadInputError
from kopt.harness.job import as_target, candidate_files, cleanup, stage_job
from kopt.harness.paths import PACKAGE_ROOT
from kopt.harness.targets.base import LineSink, Target, WorkerOutcome
from kopt.harness.tolerance import tolerance_for
from kopt.harness.verification import conditions
from kopt.harness.verification.draws import (
    Plan,
    candidate_request_sets,
    plan_verification,
    reference_request_sets,
)
from kopt.harness.verification.tensors import differing_elements, load_outputs

CHECK_NAMES = (
    "loads", "correct", "general_inputs", "hard_values", "finite", "isolated_reference",
    "no_tampering", "every_element_written", "depends_on_inputs", "depends_on_weights",
    "no_mutation", "no_aliasing", "triton_launched", "no_pytorch_fallback", "contained",
)
DRAWS = 3
"""Fresh random draws per input set (the issue asks for at least 3)."""
DEFAULT_TIMEOUT_S = 300.0
"""Per worker job; the Triton interpreter on a `shapes` entry can take a minute."""


@dataclass
class Check:
    """One named verification check and why it passed or failed."""

    name: str
    passed: bool
    detail: str

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "passed": self.passed, "detail": self.detail}


@dataclass
class VerificationReport:
    """The verdict on one candidate: every check, in `CHECK_NAMES` order."""

    case: str
    candidate: str
    device: str
    checks: list[Check]
    input_sets: list[str] = field(default_factory=list)
    elapsed_s: float = 0.0

    @property
    def accepted(self) -> bool:
        return bool(self.checks) and all(c.passed for c in self.checks)

    def failed(self) -> list[str]:
        return [c.name for c in self.checks if not c.passed]

    def check(self, name: str) -> Check:
        return next(c for c in self.checks if c.name == name)

    def to_dict(self) -> dict[str, Any]:
        """Exactly `kopt verify --json`'s object."""
        return {"accepted": self.accepted, "case": self.case, "candidate": self.candidate,
                "device": self.device, "checks": [c.to_dict() for c in self.checks]}

    def to_text(self) -> str:
        """One line per check: what the user reads and the engineer's next attempt is fed."""
        lines = [f"{c.name}: {'pass' if c.passed else 'FAIL'}: {c.detail}" for c in self.checks]
        verdict = "accepted" if self.accepted else f"rejected ({', '.join(self.failed())})"
        return "\n".join(lines + [f"verdict: {verdict}"])


_Plan = Plan


def plan_draws(case: Case, sets: Sequence[str], draws: int = DRAWS, *,
               device: str = "cpu") -> _Plan:
    """Fresh values and weights for every draw of every set, extra input sets and call
    conditions, from seeds drawn here and never sent anywhere (`verification.draws`)."""
    return plan_verification(case, list(sets), draws, device)


# The harness source the reference worker runs: what a candidate must not be able to edit.
REFERENCE_SOURCES = ("harness/worker.py", "harness/case.py", "harness/data.py",
                     "harness/jobs/reference.py", "harness/verification/guards.py",
                     "harness/verification/tensors.py", "harness/verify.py",
                     "harness/compare.py", "harness/tolerance.py",
                     "harness/verification/draws.py", "harness/verification/weights.py")


def source_fingerprint(case: Case) -> str:
    """sha256 over the case's files and the harness source the reference depends on."""
    h = hashlib.sha256()
    files = sorted(p for p in case.directory.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    files += [PACKAGE_ROOT / f for f in REFERENCE_SOURCES]
    for p in files:
        h.update(str(p).encode())
        try:
            h.update(p.read_bytes())
        except OSError:
            h.update(b"<unreadable>")
    return h.hexdigest()


def verify_candidate(case: Case | str, candidate: Path | str, *, device: str | None = None,
                     target: Target | str | None = None, timeout: float = DEFAULT_TIMEOUT_S,
                     on_line: LineSink | None = None, draws: int = DRAWS,
                     keep_jobs: bool = False) -> VerificationReport:
    """Verify one candidate file against its case (see the module docstring)."""
    return verify_candidates(case, [candidate], device=device, target=target, timeout=timeout,
                             on_line=on_line, draws=draws, keep_jobs=keep_jobs)[0]


def verify_candidates(case: Case | str, candidates: Sequence[Path | str], *,
                      device: str | None = None, target: Target | str | None = None,
                      timeout: float = DEFAULT_TIMEOUT_S, on_line: LineSink | None = None,
                      draws: int = DRAWS, max_parallel: int = 1,
                      timeouts: dict[str, float] | None = None,
                      keep_jobs: bool = False) -> list[VerificationReport]:
    """Verify several candidates of one case on the same fresh draws, with one reference run
    after every candidate worker has exited. `timeouts` overrides `timeout` per candidate
    path (as given)."""
    start = time.monotonic()
    case = case if isinstance(case, Case) else load_case(case)
    paths = candidate_files(candidates)
    dev = resolve_device(case, device)
    runner = as_target(target)
    sets = case.verification_sets(on_gpu=dev == "cuda")
    plan = plan_draws(case, sets, draws, device=dev)
    env = worker_env(dev)
    common = {"device": dev, "precision": case.manifest.precision, "interpret": dev == "cpu"}
    # The second poison pattern runs on the first set only: on the others an unwritten
    # element still shows as NaN (pattern "a") and fails `correct`/`finite`.
    cand_request = {**common, "sets": candidate_request_sets(plan)}

    fingerprint = source_fingerprint(case)

    def run_candidate(path: Path) -> tuple[Path, WorkerOutcome, float]:
        job_dir = stage_job("candidate", cand_request, case=case, candidate=path,
                            tensors=plan.tensors)
        t = (timeouts or {}).get(str(path), timeout)
        t0 = time.monotonic()
        return job_dir, runner.run(job_dir, timeout=t, env=env, on_line=on_line), t0

    with ThreadPoolExecutor(max_workers=max(1, max_parallel)) as pool:
        cand_runs = list(pool.map(run_candidate, paths))
    sources_intact = source_fingerprint(case) == fingerprint
    cand_exit = time.monotonic()

    ref_request = {**common, "sets": reference_request_sets(plan)}
    ref_dir = stage_job("reference", ref_request, case=case, tensors=plan.tensors)
    try:
        ref = runner.run(ref_dir, timeout=timeout, env=env, on_line=on_line)
        if not ref.ok:
            raise BadInputError(f"the baseline of case {case.name!r} failed in the reference "
                                f"worker: {ref.failure_reason()}",
                                fix=f"run `kopt baseline {case.name}` to see the error")
        ref_outputs = {g: load_outputs(ref_dir / "out" / f"ref-{g}.safetensors")
                       for entry in ref_request["sets"] for g in entry["groups"]}
        reports = []
        for path, (job_dir, outcome, _t0) in zip(paths, cand_runs, strict=True):
            judge = _Judge(case, dev, plan, job_dir, outcome, ref.response or {}, ref_outputs,
                           sources_intact, cand_exit)
            reports.append(VerificationReport(case.name, str(path), dev, judge.checks(),
                                              list(sets), time.monotonic() - start))
            if not keep_jobs:
                cleanup(job_dir)
        return reports
    finally:
        if not keep_jobs:
            cleanup(ref_dir)
            for job_dir, _o, _t in cand_runs:
                cleanup(job_dir)


class _Judge:
    """Computes each check from the jobs' raw tensors and recorded facts."""

    def __init__(self, case: Case, device: str, plan: _Plan, job_dir: Path,
                 outcome: WorkerOutcome, ref_response: dict[str, Any],
                 ref_outputs: dict[str, list[torch.Tensor] | None], sources_intact: bool,
                 cand_exit: float) -> None:
        self.case, self.device, self.plan = case, device, plan
        self.out = job_dir / "out"
        self.outcome = outcome
        self.resp = outcome.response or {}
        self.ref_resp = ref_response
        self.ref = ref_outputs
        self.sources_intact = sources_intact
        stage_file = self.out / "stage"
        self.stage = self.resp.get("stage") or (stage_file.read_text().strip()
                                                if stage_file.is_file() else "start")
        self.completed = outcome.ok and self.resp.get("stage") == "done"
        self._cand: dict[str, list[torch.Tensor] | None] = {}

    # -- helpers -------------------------------------------------------------------------------

    def cand(self, name: str) -> list[torch.Tensor] | None:
        """The candidate's outputs in `out/<name>.safetensors`, read from disk once (several
        checks look at the same draw; at full size each read is hundreds of MB)."""
        if name not in self._cand:
            self._cand[name] = load_outputs(self.out / f"{name}.safetensors")
        return self._cand[name]

    def tol(self) -> dict[torch.dtype, Any]:
        return {dt: tolerance_for(self.case, dt) for dt in
                (torch.float64, torch.float32, torch.float16, torch.bfloat16)}

    def forwards(self, set_name: str) -> list[dict[str, Any]]:
        return (self.resp.get("sets") or {}).get(set_name, {}).get("forwards", [])

    def not_checked(self, name: str) -> Check:
        return Check(name, False, f"not checked: the candidate did not complete "
                                  f"({self.why_incomplete()})")

    def why_incomplete(self) -> str:
        if self.outcome.timed_out or not self.resp:
            return f"{self.outcome.failure_reason()} during {self.stage}"
        return f"{self.stage} failed: {self.resp.get('error') or self.outcome.failure_reason()}"

    # -- checks ----------------------------------------------------------------------------------

    def checks(self) -> list[Check]:
        found = {
            "loads": self.loads(), "contained": self.contained(),
            "isolated_reference": self.isolated_reference(), "no_tampering": self.no_tampering(),
        }
        for name, fn in (("correct", self.correct), ("finite", self.finite),
                         ("every_element_written", self.every_element_written),
                         ("depends_on_inputs", self.depends_on_inputs),
                         ("no_mutation", self.no_mutation), ("no_aliasing", self.no_aliasing),
                         ("triton_launched", self.triton_launched),
                         ("no_pytorch_fallback", self.no_pytorch_fallback)):
            found[name] = fn() if self.completed else self.not_checked(name)
        conditions.apply(self, found, Check)  # weights, extra input sets, call conditions
        return [found[n] for n in CHECK_NAMES]

    def loads(self) -> Check:
        if self.stage in ("forward", "done"):
            return Check("loads", True, f"imported, built ModelNew, loaded the baseline's "
                                        f"state_dict strictly (import {self.resp.get('import_s', '?')} s)")
        if self.resp.get("error"):
            return Check("loads", False, f"{self.stage}: {self.resp['error']}")
        return Check("loads", False, f"{self.outcome.failure_reason()} during {self.stage}")

    def contained(self) -> Check:
        if self.completed:
            return Check("contained", True, f"every forward completed; worker exited cleanly in "
                                            f"{self.outcome.elapsed_s:.1f} s")
        return Check("contained", False, f"{self.why_incomplete()} (contained in the worker; "
                                         f"kopt kept running)")

    def isolated_reference(self) -> Check:
        if not self.sources_intact:
            return Check("isolated_reference", False,
                         "the case's files or the harness's source changed while candidate code "
                         "ran; the reference would not be the baseline's")
        return Check("isolated_reference", True,
                     f"baseline computed in a fresh worker (pid {self.ref_resp.get('pid')}) "
                     f"started after the candidate's worker (pid {self.resp.get('pid')}) exited, "
                     f"from a copy of the case; seeds never left the parent")

    def no_tampering(self) -> Check:
        problems: list[str] = list(self.resp.get("tampering") or [])
        left = self.resp.get("leftovers") or {}
        problems += [f"thread still running after forward: {t}" for t in left.get("threads", [])]
        problems += [f"process still running after forward: {p}" for p in left.get("processes", [])]
        problems += [f"spawned a process: {s}" for s in self.resp.get("spawns") or []]
        problems += [f"wrote outside its job directory: {w}" for w in self.resp.get("writes") or []]
        for set_name in self.plan.sets:
            for f in self.forwards(set_name):
                if not f.get("mode_intact", True):
                    problems.append("removed the harness's op recorder from the dispatch stack")
                if f.get("side_streams"):
                    problems.append(f"launched {', '.join(f['side_streams'])} on a side stream")
                if f.get("stream_restored") is False:
                    problems.append("left a different current CUDA stream after forward")
        problems = list(dict.fromkeys(problems))
        if problems:
            more = f" (+{len(problems) - 6} more)" if len(problems) > 6 else ""
            return Check("no_tampering", False, "; ".join(problems[:6]) + more)
        if not self.resp:
            return Check("no_tampering", False, "not checked: the worker left no record "
                                                f"({self.outcome.failure_reason()})")
        return Check("no_tampering", True, "no torch, clock or harness object replaced; no "
                                           "thread, process, side stream or stray file left")

    def correct(self) -> Check:
        tol = self.tol()
        worst = 0.0
        for set_name in self.plan.sets:
            problem = self._structure(set_name)
            if problem:
                return Check("correct", False, f"{set_name}: {problem}")
            for i, group in enumerate(self.plan.draws[set_name]):
                out, ref = self.cand(f"cand-{group}"), self.ref[group]
                if out is None or ref is None:
                    return Check("correct", False, f"{set_name} draw {i}: no outputs recorded")
                cmp = compare_outputs(out, ref, tol)
                if not cmp.ok:
                    return Check("correct", False, f"{set_name} draw {i}"
                                                   f"{self.plan.labels.get(group, '')}: {cmp.to_text()}")
                worst = max(worst, cmp.rel_err)
        n = len(self.plan.draws[self.plan.sets[0]])
        return Check("correct", True, f"{n} fresh draws x {len(self.plan.sets)} input sets "
                                      f"({', '.join(self.plan.sets)}) within tolerance; worst "
                                      f"rel err {worst:.3g}")

    def _structure(self, set_name: str) -> str:
        ref = (self.ref_resp.get("sets") or {}).get(set_name, {}).get("structure") or {}
        for f in self.forwards(set_name):
            got = f.get("structure") or {}
            if len(got.get("devices", [])) != len(ref.get("devices", [])):
                return (f"{len(got.get('devices', []))} output tensors, the baseline returns "
                        f"{len(ref.get('devices', []))}")
            if got.get("treespec") != ref.get("treespec"):
                return f"output structure {got.get('treespec')} differs from the baseline's {ref.get('treespec')}"
            for key in ("devices", "shapes", "dtypes"):
                if got.get(key) != ref.get(key):
                    return f"output {key} {got.get(key)}, the baseline's {ref.get(key)}"
        return ""

    def finite(self) -> Check:
        for set_name in self.plan.sets:
            for i, group in enumerate(self.plan.draws[set_name]):
                out, ref = self.cand(f"cand-{group}"), self.ref[group]
                if out is None or ref is None or len(out) != len(ref):
                    continue
                for j, (o, r) in enumerate(zip(out, ref, strict=True)):
                    if not o.dtype.is_floating_point or o.shape != r.shape:
                        continue
                    bad = int((~torch.isfinite(o) & torch.isfinite(r)).sum())
                    if bad:
                        return Check("finite", False, f"{set_name} draw {i}: output[{j}] has {bad} "
                                                      f"NaN/Inf where the baseline is finite")
        return Check("finite", True, "NaN/Inf only where the baseline has them")

    def every_element_written(self) -> Check:
        for set_name in self.plan.sets[:1]:
            a = self.cand(f"cand-{self.plan.draws[set_name][0]}")
            b = self.cand(f"cand-{set_name}-poison-b")
            if a is None or b is None or len(a) != len(b):
                return Check("every_element_written", False, f"{set_name}: poisoned re-run missing")
            for j, (x, y) in enumerate(zip(a, b, strict=True)):
                n = differing_elements(x, y)
                if n:
                    return Check("every_element_written", False,
                                 f"{set_name}: {n} of {x.numel()} elements of output[{j}] changed "
                                 f"with the poison pattern of fresh allocations (NaN vs -1234.5): "
                                 f"the kernel never writes them")
        return Check("every_element_written", True,
                     f"identical outputs on {self.plan.sets[0]} with fresh allocations poisoned "
                     f"by two patterns (NaN elsewhere)")

    def depends_on_inputs(self) -> Check:
        tol = self.tol()
        for set_name in self.plan.sets:
            if self.plan.constant_inputs[set_name]:
                continue
            facts = (self.resp.get("sets") or {}).get(set_name, {})
            if not facts.get("inplace_same_storage", False):
                return Check("depends_on_inputs", False, f"{set_name}: the in-place rewrite did not "
                                                         f"keep the input storage")
            group = self.plan.inplace[set_name]
            out, ref = self.cand(f"cand-{group}"), self.ref[group]
            if out is None or ref is None:
                return Check("depends_on_inputs", False, f"{set_name}: no outputs recorded")
            cmp = compare_outputs(out, ref, tol)
            if not cmp.ok:
                return Check("depends_on_inputs", False,
                             f"{set_name}: new values written into the same input storage: "
                             f"{cmp.to_text()}")
            draws = self.plan.draws[set_name]
            for g0, g1 in zip(draws, draws[1:], strict=False):
                o0, o1, r0, r1 = self.cand(f"cand-{g0}"), self.cand(f"cand-{g1}"), self.ref[g0], self.ref[g1]
                if o0 and o1 and r0 and r1 and len(o0) == len(o1) == len(r0) == len(r1):
                    for j in range(len(o0)):
                        if differing_elements(r0[j], r1[j]) and not differing_elements(o0[j], o1[j]):
                            return Check("depends_on_inputs", False,
                                         f"{set_name}: output[{j}] identical for different inputs")
        return Check("depends_on_inputs", True, "outputs follow new values written into the "
                                                "same input storage, and differ between draws")

    def no_mutation(self) -> Check:
        for set_name in self.plan.sets:
            for group in self.plan.draws[set_name] + [self.plan.inplace[set_name]]:
                post_file = self.out / f"post-{group}.safetensors"
                if not post_file.is_file():
                    return Check("no_mutation", False, f"{set_name}: inputs after forward missing")
                post = load_file(str(post_file))
                for k, staged in self.plan.tensors[group].items():
                    n = differing_elements(post[k], staged) if k in post else staged.numel()
                    if n:
                        return Check("no_mutation", False,
                                     f"{set_name}: forward changed {n} of {staged.numel()} "
                                     f"elements of input {k}")
            post_w = self.out / f"weights-post-{set_name}.safetensors"
            weights = self.plan.tensors[self.plan.weights_of.get(set_name, f"weights-{set_name}")]
            if weights:
                post = load_file(str(post_w)) if post_w.is_file() else {}
                for k, staged in weights.items():
                    # A candidate may hold a weight in another dtype; the staged values round-trip.
                    n = (differing_elements(post[k].to(staged.dtype), staged) if k in post
                         else staged.numel())
                    if n:
                        return Check("no_mutation", False, f"{set_name}: forward changed {n} of "
                                                           f"{staged.numel()} elements of weight {k}")
        return Check("no_mutation", True, "inputs and weights bit-identical after every forward")

    def no_aliasing(self) -> Check:
        for set_name in self.plan.sets:
            for f in self.forwards(set_name):
                if f.get("aliasing"):
                    return Check("no_aliasing", False, f"{set_name}: {'; '.join(f['aliasing'][:3])}")
        return Check("no_aliasing", True, "outputs share no storage with inputs or weights")

    def triton_launched(self) -> Check:
        kernels: set[str] = set()
        for set_name in self.plan.sets:
            for f in self.forwards(set_name):
                if not f.get("launches"):
                    return Check("triton_launched", False,
                                 f"{set_name}: a forward launched no Triton kernel")
                kernels.update(f.get("kernels", []))
        launches = [f["launches"] for s in self.plan.sets for f in self.forwards(s)]
        return Check("triton_launched", True, f"{', '.join(sorted(kernels))} "
                                              f"({min(launches)}-{max(launches)} launches per forward)")

    def no_pytorch_fallback(self) -> Check:
        remaining: set[str] = set()
        for set_name in self.plan.sets:
            base = set((self.ref_resp.get("sets") or {}).get(set_name, {}).get("compute_ops", []))
            ran: set[str] = set()
            for f in self.forwards(set_name):
                ran.update(f.get("compute_ops", []))
            if base and base <= ran:
                return Check("no_pytorch_fallback", False,
                             f"{set_name}: still runs every PyTorch compute op the baseline runs "
                             f"({', '.join(sorted(base))}); a Triton kernel beside them is a decoy")
            remaining |= ran & base
        return Check("no_pytorch_fallback", True,
                     f"PyTorch ops remaining: {', '.join(sorted(remaining)) or 'none'}")

