"""The `verification_tool`: is a candidate correct, honest and self-contained?

The parent draws fresh seeds (never visible to the candidate) and reads the candidate's source
(`static_clean`). The baseline runs first, in an isolated interpreter (`python -I -S`, never a
standby) on those inputs; its outputs are loaded here and its job folder removed before any
candidate's process starts. Each candidate then runs under a supervisor
(`harness.jobs.supervised`): inputs reach it only after import, and its outputs and facts leave
as they are produced; the supervisor writes the record after the candidate's process is gone.
Every verdict is computed here; nothing the candidate prints or writes counts. Check names are
stable identifiers (ARCHITECTURE.md); docs/VERIFY.md says what each rests on.
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
from kopt.harness.job import (
    as_target,
    candidate_files,
    cleanup,
    jobs_root,
    restage_request,
    stage_job,
)
from kopt.harness.model_state import ATTRIBUTE_PREFIX
from kopt.harness.paths import PACKAGE_ROOT
from kopt.harness.steps import Steps
from kopt.harness.targets.base import LineSink, Target, WorkerOutcome
from kopt.harness.tolerance import tolerance_for
from kopt.harness.verification import conditions
from kopt.harness.verification.draws import (
    Plan,
    candidate_request_sets,
    drop_refused,
    plan_verification,
    reference_request_sets,
)
from kopt.harness.verification.guards import library_ops_of
from kopt.harness.verification.tensors import bitwise_equal, differing_elements, load_outputs

CHECK_NAMES = (
    "loads", "correct", "general_inputs", "hard_values", "finite", "isolated_reference",
    "no_tampering", "every_element_written", "depends_on_inputs", "depends_on_weights",
    "no_mutation", "no_aliasing", "triton_launched", "no_pytorch_fallback", "contained",
    "static_clean",
)
DRAWS = 3
"""Fresh random draws per input set (the issue asks for at least 3)."""
LIBRARY_REPLACED_SHARE = 0.9
"""A baseline made only of library calls (convolutions, GEMMs) whose candidate still makes
calls of every family but, in every forward, on at most this share of the baseline's library
work (elements) has replaced some of those calls with its own kernels (a depthwise convolution
generated, the 1x1 convolution after it kept): not a decoy. A decoy beside the same calls
repeats all of the baseline's library work."""
FALLBACK_SHARE = 0.5
"""A candidate whose PyTorch compute ops (anything but allocation, views and copies:
`guards.NON_COMPUTE_OPS`) touch at least this share of the elements the baseline's ops touch
does the work in PyTorch, whichever ops it picked. A partial fusion that leaves one pointwise
op of several to PyTorch stays under it."""
DEFAULT_TIMEOUT_S = 300.0
"""Per worker job when one is asked for explicitly (`kopt bench`); `kopt verify` fits its own
default to the case (`fitted_timeout`)."""
MAX_TIMEOUT_S = 600.0
"""The cap of a fitted timeout, and the reference job's limit when none is given."""
TIMEOUT_FLOOR_S = 60.0
TIMEOUT_FACTOR = 20.0


@dataclass
class Check:
    """One named verification check and why it passed or failed."""

    name: str
    passed: bool
    detail: str
    ran: bool = True
    """False when the check could not run (the candidate never imported); `passed` is False."""

    @property
    def status(self) -> str:
        return "not run" if not self.ran else ("pass" if self.passed else "fail")

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "passed": self.passed, "detail": self.detail,
                "status": self.status}


@dataclass
class VerificationReport:
    """The verdict on one candidate: every check, in `CHECK_NAMES` order."""

    case: str
    candidate: str
    device: str
    checks: list[Check]
    input_sets: list[str] = field(default_factory=list)
    elapsed_s: float = 0.0
    not_a_candidate: str = ""
    """Why the file is not a candidate at all (empty, binary, no Python, no ModelNew): the
    CLI's bad input (exit 2). Empty when it is one."""
    steps: dict[str, float] = field(default_factory=dict)
    """Wall seconds of each step: `draws` (fresh values drawn and staged), `reference` (the
    baseline's job, outputs read back), `candidate` (its job; several candidates run side by
    side), `judge` (this candidate's checks in the parent). Not part of `to_dict`."""

    @property
    def accepted(self) -> bool:
        return bool(self.checks) and all(c.passed for c in self.checks)

    def failed(self) -> list[str]:
        """Checks that ran and failed (checks that could not run are not listed)."""
        return [c.name for c in self.checks if not c.passed and c.ran]

    def check(self, name: str) -> Check:
        return next(c for c in self.checks if c.name == name)

    def to_dict(self) -> dict[str, Any]:
        """Exactly `kopt verify --json`'s object."""
        return {"accepted": self.accepted, "case": self.case, "candidate": self.candidate,
                "device": self.device, "checks": [c.to_dict() for c in self.checks]}

    def to_text(self) -> str:
        """One line per check: what the user reads and the engineer's next attempt is fed."""
        lines = [f"{c.name}: {'pass' if c.passed else 'FAIL' if c.ran else 'not run'}: {c.detail}"
                 for c in self.checks]
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
                     "harness/compare.py", "harness/tolerance.py", "harness/jobs/candidate.py",
                     "harness/jobs/supervised.py", "harness/verification/static.py",
                     "harness/verification/draws.py", "harness/verification/weights.py",
                     "harness/verification/conditions.py",
                     "harness/verification/fingerprints.py")


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
                     target: Target | str | None = None, timeout: float | None = None,
                     on_line: LineSink | None = None, draws: int = DRAWS,
                     keep_jobs: bool = False, min_timeout: float = 0.0) -> VerificationReport:
    """Verify one candidate file against its case (see the module docstring)."""
    return verify_candidates(case, [candidate], device=device, target=target, timeout=timeout,
                             on_line=on_line, draws=draws, keep_jobs=keep_jobs,
                             min_timeout=min_timeout)[0]


def verify_candidates(case: Case | str, candidates: Sequence[Path | str], *,
                      device: str | None = None, target: Target | str | None = None,
                      timeout: float | None = None, on_line: LineSink | None = None,
                      draws: int = DRAWS, max_parallel: int = 1,
                      timeouts: dict[str, float] | None = None,
                      keep_jobs: bool = False, min_timeout: float = 0.0) -> list[VerificationReport]:
    """Verify several candidates of one case on the same fresh draws, with one reference run
    before any candidate's process starts. `timeout` per candidate job (None: fitted to the
    case, `fitted_timeout`, and never under `min_timeout`); `timeouts` overrides it per
    candidate path (as given)."""
    start = time.monotonic()
    case = case if isinstance(case, Case) else load_case(case)
    all_paths = candidate_files(candidates)
    dev = resolve_device(case, device)
    if timeout is not None and timeout <= 0:
        raise BadInputError(f"--timeout must be a positive number of seconds (not {timeout:g})",
                            fix=f"e.g. --timeout {DEFAULT_TIMEOUT_S:g}")
    findings = {p: read_candidate(p) for p in all_paths}
    paths = [p for p in all_paths if not findings[p].not_a_candidate]
    if not paths:
        return [_not_a_candidate(case.name, p, dev, findings[p], time.monotonic() - start)
                for p in all_paths]
    runner = as_target(target)
    steps: dict[str, float] = {}
    env = worker_env(dev)
    # the reference's isolated interpreter and the candidate's worker import torch and triton
    # (2-5 s each) while the inputs are drawn (harness.targets.standby)
    prepare = getattr(runner, "prepare", None)
    if prepare is not None:
        prepare(env, jobs_root())
    sets = case.verification_sets(on_gpu=dev == "cuda")
    plan = plan_draws(case, sets, draws, device=dev)
    steps["draws: weights and inputs"] = time.monotonic() - start
    common = {"device": dev, "precision": case.manifest.precision, "interpret": dev == "cpu"}
    # The second poison pattern runs on the first set only: on the others an unwritten
    # element still shows as NaN (pattern "a") and fails `correct`/`finite`.
    cand_request = {**common, "sets": candidate_request_sets(plan)}

    fingerprint = source_fingerprint(case)

    # The reference first, in an isolated interpreter that no candidate code has touched;
    # its outputs are held here, in the parent, and its job folder is gone before any
    # candidate's process starts.
    ref_request = {**common, "sets": reference_request_sets(plan)}
    ref_dir = stage_job("reference", ref_request, case=case, tensors=plan.tensors)
    # Each candidate's folder now, while the reference's staged files exist: its weights and
    # inputs are hard links to them, written once (an 8.6 GB model's two state_dicts were
    # written for the reference and again for each candidate). Its worker takes them off the
    # disk before the candidate is imported, as before.
    staged: dict[Path, Path] = {}
    try:
        for path in paths:
            staged[path] = stage_job("candidate", cand_request, case=case, candidate=path,
                                     tensors=plan.tensors, link_from=ref_dir)
    except BaseException:
        for job_dir in [ref_dir, *staged.values()]:
            cleanup(job_dir)
        raise
    steps["draws"] = time.monotonic() - start
    steps["draws: staged files"] = steps["draws"] - steps["draws: weights and inputs"]
    try:
        ref = runner.run(ref_dir, timeout=timeout or MAX_TIMEOUT_S, env=env, on_line=on_line)
        if not ref.ok:
            raise BadInputError(f"the baseline of case {case.name!r} failed in the reference "
                                f"worker: {ref.failure_reason()}",
                                fix=f"run `kopt baseline {case.name}` to see the error")
        refused = {name: facts["refused"] for name, facts in
                   ((ref.response or {}).get("sets") or {}).items() if "refused" in facts}
        if refused:  # extra sets the baseline refuses on this device: left out, saying why
            drop_refused(plan, refused, dev)
            cand_request = {**common, "sets": candidate_request_sets(plan)}
            for job_dir in staged.values():
                restage_request(job_dir, {"sets": cand_request["sets"]})
        ref_outputs = {g: load_outputs(ref_dir / "out" / f"ref-{g}.safetensors")
                       for entry in ref_request["sets"] if entry["name"] not in refused
                       for g in entry["groups"]}
        truth, rounded = _yardsticks(ref_dir, [entry for entry in ref_request["sets"]
                                               if entry.get("truth")])
    except BaseException:
        if not keep_jobs:
            for job_dir in staged.values():
                cleanup(job_dir)
        raise
    finally:
        if not keep_jobs:
            cleanup(ref_dir)
    fitted = timeout or max(min_timeout, fitted_timeout(ref.elapsed_s, dev))
    steps["reference"] = time.monotonic() - start - steps["draws"]

    def run_candidate(path: Path) -> tuple[Path, WorkerOutcome, float]:
        job_dir = staged[path]
        t = (timeouts or {}).get(str(path), fitted)
        t0 = time.monotonic()
        return job_dir, runner.run(job_dir, timeout=t, env=env, on_line=on_line), t0

    try:
        with ThreadPoolExecutor(max_workers=max(1, max_parallel)) as pool:
            cand_runs = list(pool.map(run_candidate, paths))
        sources_intact = source_fingerprint(case) == fingerprint
        cand_exit = time.monotonic()
        steps["candidate"] = cand_exit - start - steps["draws"] - steps["reference"]
        judged: dict[Path, VerificationReport] = {}
        truth_of_every_draw = False
        for path, (job_dir, outcome, _t0) in zip(paths, cand_runs, strict=True):
            t_judge = time.monotonic()
            judge = _Judge(case, dev, plan, job_dir, outcome, ref.response or {}, ref_outputs,
                           sources_intact, cand_exit, findings[path], path, truth, rounded)
            checks = judge.checks()
            extra: dict[str, float] = {}
            if judge.truth_wanted and not truth_of_every_draw:
                # only the element-wise bound missed: float64 decides. Every draw at once (a
                # check stops at its first miss, so a judgement names only some of the groups
                # that will need it), once for all the candidates
                t_truth = time.monotonic()
                more_truth, more_rounded = _truth_job(case, runner, env, common, plan,
                                                      timeout or MAX_TIMEOUT_S, on_line, keep_jobs)
                truth.update(more_truth)
                rounded.update(more_rounded)
                truth_of_every_draw = True
                judge.truth, judge.truth_wanted = truth, set()  # the same outputs, read once
                judge.rounded = rounded
                checks = judge.checks()
                extra["truth"] = time.monotonic() - t_truth
            judge_s = time.monotonic() - t_judge - sum(extra.values())
            # the judgement's parts (reading the candidate's outputs is counted once, not also
            # inside the check that read them first), and the rest as `judge`
            parts = judge.clock.to_dict()
            reads = parts.pop("read outputs", 0.0)
            parts = {k: v for k, v in parts.items() if v >= 0.01}
            detail = {f"judge {k}": v for k, v in parts.items()}
            if reads:
                detail["judge read outputs"] = reads
            judged[path] = VerificationReport(
                case.name, str(path), dev, checks, list(sets), time.monotonic() - start,
                steps={**steps, **extra, **detail,
                       "judge": max(0.0, judge_s - sum(detail.values()))})
        return [judged[p] if p in judged else
                _not_a_candidate(case.name, p, dev, findings[p], time.monotonic() - start)
                for p in all_paths]
    finally:
        if not keep_jobs:
            for job_dir in staged.values():
                cleanup(job_dir)


def _truth_job(case: Case, runner: Any, env: dict[str, str], common: dict[str, Any],
               plan: _Plan, timeout: float, on_line: LineSink | None,
               keep_jobs: bool) -> tuple[dict[str, list[torch.Tensor] | None],
                                         dict[str, list[torch.Tensor] | None]]:
    """The baseline again on every draw, in float64 and under random rounding as well (a
    reference job, in its own isolated process): `_yardsticks` (None where the model has no
    float64 path, which leaves the element-wise verdict standing). Run only for a candidate
    whose miss rounding could explain."""
    sets = [{**entry, "truth": True, "rounding": True} for entry in reference_request_sets(plan)]
    job = stage_job("reference", {**common, "sets": sets}, case=case, tensors=plan.tensors)
    try:
        outcome = runner.run(job, timeout=timeout, env=env, on_line=on_line)
        if not outcome.ok:
            return {}, {}
        return _yardsticks(job, sets)
    finally:
        if not keep_jobs:
            cleanup(job)


def _yardsticks(job: Path, sets: list[dict[str, Any]]
                ) -> tuple[dict[str, list[torch.Tensor] | None], dict[str, list[torch.Tensor] | None]]:
    """Group -> the baseline's outputs in float64, and group -> its outputs under random
    rounding (`harness.verification.rounding`), as a reference job with `"truth": true` sets
    wrote them (None where it could not)."""
    groups = [g for entry in sets for g in entry["groups"]]
    return ({g: load_outputs(job / "out" / f"truth-{g}.safetensors") for g in groups},
            {g: load_outputs(job / "out" / f"rounded-{g}.safetensors") for g in groups})


def _unlike_elements(x: torch.Tensor, y: torch.Tensor, tol: Any, chunk: int = 1 << 24) -> int:
    """Elements of two runs of the same forward that differ by more than `tol` (a poisoned
    element that was never written is NaN in one run and -1234.5 in the other); bit-identical
    elements and last-bit differences of a nondeterministic library op are not counted.
    Integer and bool outputs (or no tolerance) must be identical."""
    if x.shape != y.shape or x.dtype != y.dtype:
        return max(x.numel(), y.numel())
    if tol is None or not x.dtype.is_floating_point:
        return differing_elements(x, y)
    if bitwise_equal(x, y):  # the usual answer, in one pass
        return 0
    fx, fy = x.reshape(-1), y.reshape(-1)
    n = 0
    for i in range(0, fx.numel(), chunk):
        a, b = fx[i:i + chunk].double(), fy[i:i + chunk].double()
        n += int((~torch.isclose(a, b, rtol=tol.rtol, atol=tol.atol, equal_nan=True)).sum())
    return n


def fitted_timeout(reference_s: float, device: str) -> float:
    """The default per-candidate timeout: `TIMEOUT_FACTOR` times what the reference job took
    (start-up included), at least `TIMEOUT_FLOOR_S` (more on the CPU interpreter, which runs a
    kernel far slower than eager runs the baseline, and on a loaded 2-core machine has been
    seen to need over 120 s for a causal softmax on smoke), at most `MAX_TIMEOUT_S`."""
    floor = TIMEOUT_FLOOR_S * (5 if device == "cpu" else 1)
    return float(min(MAX_TIMEOUT_S, max(floor, TIMEOUT_FACTOR * reference_s)))


@dataclass
class _Source:
    """What the parent reads of a candidate file before anything runs."""

    not_a_candidate: str = ""
    findings: list[Any] = field(default_factory=list)


def read_candidate(path: Path) -> _Source:
    """The file as the parent sees it: is it a candidate at all, and what does the static
    check refuse in it (harness.verification.static)?"""
    from kopt.harness.verification.static import scan_source

    raw = path.read_bytes()
    if not raw.strip():
        return _Source(f"{path} is empty: a candidate defines `class ModelNew(nn.Module)`")
    if b"\0" in raw:
        return _Source(f"{path} is a binary file, not Python source")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        return _Source(f"{path} is not UTF-8 text (byte {err.start}): not Python source")
    try:
        findings = scan_source(text, str(path))
    except SyntaxError as err:
        where = f"{path}:{err.lineno}" + (f":{err.offset}" if err.offset else "")
        code = (err.text or "").strip()
        return _Source(f"{where}: SyntaxError: {err.msg}" + (f": {code}" if code else ""))
    if not _binds_model_new(text):
        return _Source(f"{path} defines no `ModelNew` (a candidate defines "
                       f"`class ModelNew(nn.Module)`)")
    return _Source("", findings)


def _binds_model_new(text: str) -> bool:
    import ast

    from kopt.harness.verification.static import parse_source

    for node in parse_source(text).body:
        if isinstance(node, ast.ClassDef) and node.name == "ModelNew":
            return True
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == "ModelNew" for t in targets):
                return True
        if isinstance(node, (ast.Import, ast.ImportFrom)) and any(
                (a.asname or a.name) == "ModelNew" for a in node.names):
            return True
    return False


def _not_a_candidate(case: str, path: Path, device: str, source: _Source,
                     elapsed: float) -> VerificationReport:
    why = source.not_a_candidate
    checks = [Check("loads", False, why)] + [
        Check(n, False, "not run: the file is not a candidate", ran=False)
        for n in CHECK_NAMES if n != "loads"]
    return VerificationReport(case, str(path), device, checks, [], elapsed, not_a_candidate=why)


class _Judge:
    """Computes each check from the jobs' raw tensors and recorded facts."""

    def __init__(self, case: Case, device: str, plan: _Plan, job_dir: Path,
                 outcome: WorkerOutcome, ref_response: dict[str, Any],
                 ref_outputs: dict[str, list[torch.Tensor] | None], sources_intact: bool,
                 cand_exit: float, source: _Source | None = None,
                 path: Path | None = None,
                 truth: dict[str, list[torch.Tensor] | None] | None = None,
                 rounded: dict[str, list[torch.Tensor] | None] | None = None) -> None:
        self.source = source or _Source()
        self.truth = truth or {}
        """Group -> the baseline's outputs computed in float64 (the hard-value draws, and the
        groups a first judgement asked for: `truth_wanted`)."""
        self.rounded = rounded or {}
        """Group -> the baseline's outputs under random rounding, where the truth has them:
        how far from it honest rounding may land (`harness.verification.rounding`)."""
        self.truth_wanted: set[str] = set()
        """Groups whose outputs missed a bound rounding could explain and have no float64
        truth yet, or no random-rounding run when the plain baseline's distance from the truth
        was not enough: `verify_candidates` computes both for every draw in a second reference
        job and judges again."""
        self.path = path
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
        # A record counts only from a worker that exited by itself with status 0: the
        # supervisor (harness.jobs.supervised) writes it after the candidate's process is gone.
        self.completed = (outcome.ok and outcome.returncode == 0
                          and self.resp.get("stage") == "done")
        self._cand: dict[str, list[torch.Tensor] | None] = {}
        self.clock = Steps()
        """Seconds of this judgement by part: `read outputs` (the candidate's files) and each
        check by name, reported as `judge <part>` steps."""
        self.finite_pairs: dict[tuple[int, int], tuple[torch.Tensor, torch.Tensor]] = {}
        """(id(output), id(reference)) -> the pair, for pairs a comparison saw free of NaN/Inf
        (`finite` skips them). The pair is held here, so no other tensor can take its ids."""

    # -- helpers -------------------------------------------------------------------------------

    def cand(self, name: str) -> list[torch.Tensor] | None:
        """The candidate's outputs in `out/<name>.safetensors`, read from disk once (several
        checks look at the same draw; at full size each read is hundreds of MB)."""
        if name not in self._cand:
            with self.clock("read outputs"):
                self._cand[name] = load_outputs(self.out / f"{name}.safetensors")
        return self._cand[name]

    def compare(self, out: list[torch.Tensor], group: str) -> tuple[Any, str | None]:
        """`out` against the baseline's outputs of `group`: (comparison, None) when within the
        case's tolerance, else (comparison, what is wrong).

        A rewrite that holds for every input (a sum over a linear layer's outputs as a product
        with summed weights) rounds differently from the baseline: at a few elements where a
        long sum cancels it misses the element-wise bound while the whole tensor is within the
        case's relative bound (KernelBench level-2 14 on the H100: 1-2 of 1024 elements,
        relative error 3e-7). There the baseline run in float64 decides, as for the hard-value
        draws: the candidate must be no farther from it than `TRUTH_MULTIPLIER` times the
        baseline itself (or within the case's bound; `ELEMENTWISE_TRUTH_MULTIPLIER` times
        where every element is inside its own bound). The same holds the other way round: every
        element within the bound but the whole tensor's relative error over it, where the
        output's norm cancels to near zero (`Comparison.within_elementwise`). Without that
        truth yet, the group is asked for (`truth_wanted`) and the comparison fails for now."""
        ref = self.ref.get(group)
        if ref is None:
            return None, "no baseline outputs recorded"
        tol = self.tol()
        cmp = compare_outputs(out, ref, tol)
        for o, r, t in zip(out, ref, cmp.tensors, strict=False):
            if t.all_finite:
                self.finite_pairs[(id(o), id(r))] = (o, r)
        if cmp.ok:
            return cmp, None
        one_bound = cmp.within_allowance(tol, ref)
        if not (one_bound or cmp.rounding_only()):
            return cmp, cmp.to_text()
        truth = self.truth.get(group)
        if truth is None:
            self.truth_wanted.add(group)
            return cmp, cmp.to_text()
        if not one_bound:  # both bounds missed: honest only where the model's own casts round
            closer, why = conditions.rounds_like_baseline(out, ref, truth, tol,
                                                          rounded=self.rounded.get(group))
        else:
            elementwise_only = cmp.within_elementwise() and not cmp.within_norm(tol, ref)
            closer, why = conditions.no_worse_than_baseline(
                out, ref, truth, tol, conditions.ELEMENTWISE_TRUTH_MULTIPLIER if elementwise_only
                else conditions.TRUTH_MULTIPLIER, rounded=self.rounded.get(group))
        if not closer:
            if self.rounded.get(group) is None:  # the plain baseline's distance alone fell short
                self.truth_wanted.add(group)
            return cmp, f"{cmp.to_text()}; {why}"
        return cmp, None

    def tol(self) -> dict[torch.dtype, Any]:
        return {dt: tolerance_for(self.case, dt) for dt in
                (torch.float64, torch.float32, torch.float16, torch.bfloat16)}

    def forwards(self, set_name: str) -> list[dict[str, Any]]:
        return (self.resp.get("sets") or {}).get(set_name, {}).get("forwards", [])

    def not_checked(self, name: str) -> Check:
        if self.stage in ("import", "start", "build", "load_state_dict"):
            return Check(name, False, f"not run: the candidate did not load ({self.stage})",
                         ran=False)
        return Check(name, False, f"not checked: the candidate did not complete "
                                  f"({self.why_incomplete()})")

    def why_incomplete(self) -> str:
        if self.outcome.timed_out or not self.resp:
            return f"{self.outcome.failure_reason()} during {self.stage}"
        return (f"{self.stage} failed: {self._error() or self.outcome.failure_reason()}"
                f"{self._where()}")

    # -- checks ----------------------------------------------------------------------------------

    def checks(self) -> list[Check]:
        found = {
            "loads": self.loads(), "contained": self.contained(),
            "isolated_reference": self.isolated_reference(), "no_tampering": self.no_tampering(),
            "static_clean": self.static_clean(),
        }
        for name, fn in (("correct", self.correct), ("finite", self.finite),
                         ("every_element_written", self.every_element_written),
                         ("depends_on_inputs", self.depends_on_inputs),
                         ("no_mutation", self.no_mutation), ("no_aliasing", self.no_aliasing),
                         ("triton_launched", self.triton_launched),
                         ("no_pytorch_fallback", self.no_pytorch_fallback)):
            with self.clock(name):
                found[name] = fn() if self.completed else self.not_checked(name)
        with self.clock("weights, sets, conditions"):
            conditions.apply(self, found, Check)  # weights, extra input sets, call conditions
        return [found[n] for n in CHECK_NAMES]

    def static_clean(self) -> Check:
        found = self.source.findings
        if found:
            more = f" (+{len(found) - 5} more)" if len(found) > 5 else ""
            return Check("static_clean", False, "refused in the source: "
                         + "; ".join(f.text() for f in found[:5]) + more)
        return Check("static_clean", True, "no introspection, patching, process, file or "
                                           "other-array-library use in the source "
                                           "(docs/VERIFY.md lists what is allowed)")

    def _where(self) -> str:
        """The candidate's own file and line where it failed (from the worker's traceback)."""
        tb = str(self.resp.get("traceback") or "")
        if self.path is not None and tb.startswith("at candidate.py:"):
            return " at " + tb.split("\n", 1)[0][3:].replace("candidate.py", str(self.path), 1)
        return ""

    def _error(self) -> str:
        err = str(self.resp.get("error") or "")
        if self.path is not None:
            err = err.replace("candidate.py", str(self.path))
        return err

    def loads(self) -> Check:
        if self.stage in ("forward", "done"):
            imp = self.resp.get("import_s")
            took = f" (import {imp} s)" if imp is not None else ""
            return Check("loads", True, f"imported, built ModelNew, loaded the baseline's "
                                        f"state_dict strictly{took}")
        if self.resp.get("error"):
            return Check("loads", False, f"{self.stage}: {self._error()}{self._where()}")
        return Check("loads", False, f"{self.outcome.failure_reason()} during {self.stage}")

    def contained(self) -> Check:
        if (not self.completed and not self.outcome.timed_out and self.resp.get("error")
                and self.stage in ("import", "build", "load_state_dict")):
            return Check("contained", False, "not run: the candidate did not load", ran=False)
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
        ref_pid = self.ref_resp.get("pid")
        ahead = ", started ahead with its imports done" if self.ref_resp.get("worker_started") == "standby" else ""
        # the worker reports its flags: every target starts the reference with -I -S (the ssh
        # agent falls back to a plain fresh process where it cannot read its python's sys.path)
        how = ("an isolated interpreter (python -I -S" if self.ref_resp.get("isolated") is not False
               else "a fresh interpreter (python, without -I -S")
        return Check("isolated_reference", True,
                     f"baseline computed in {how}"
                     f"{f', pid {ref_pid}' if ref_pid else ''}{ahead}) before any candidate code ran, "
                     f"from a copy of the case; its outputs held only by kopt; the case and "
                     f"the harness unchanged after the candidate ran")

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
        if not self.resp or self.resp.get("tampering") is None:
            if self.stage in ("import", "start") and not self.outcome.timed_out:
                return Check("no_tampering", False, "not run: the candidate did not load",
                             ran=False)
            return Check("no_tampering", False, "not checked: the worker left no record "
                                                f"({self.outcome.failure_reason()})")
        return Check("no_tampering", True, "no torch, clock or harness object replaced; no "
                                           "thread, process, side stream or stray file left")

    def correct(self) -> Check:
        worst = 0.0
        judged_by_truth: list[str] = []
        for set_name in self.plan.sets:
            problem = self._structure(set_name)
            if problem:
                return Check("correct", False, f"{set_name}: {problem}")
            for i, group in enumerate(self.plan.draws[set_name]):
                out, ref = self.cand(f"cand-{group}"), self.ref[group]
                if out is None or ref is None:
                    return Check("correct", False, f"{set_name} draw {i}: no outputs recorded")
                cmp, problem = self.compare(out, group)
                if problem:
                    return Check("correct", False, f"{set_name} draw {i}"
                                                   f"{self.plan.labels.get(group, '')}: {problem}")
                if not cmp.ok:
                    judged_by_truth.append(f"{set_name} draw {i}")
                worst = max(worst, cmp.rel_err)
            # A result must still hold its values after the next call (checked on the live
            # tensors the candidate returned, sent again after that call).
            draws = self.plan.draws[set_name]
            for i, group in enumerate(draws[:-1]):
                later = self.cand(f"previous-cand-{draws[i + 1]}")
                if later is None:
                    continue
                first = self.cand(f"cand-{group}") or []
                if len(later) == len(first) and all(map(bitwise_equal, later, first)):
                    continue  # the very bytes judged above
                _cmp, problem = self.compare(later, group)
                if problem:
                    return Check("correct", False,
                                 f"{set_name} draw {i}: the result changed when forward ran "
                                 f"again (a result must stay valid after the next call): "
                                 f"{problem}")
        n = len(self.plan.draws[self.plan.sets[0]])
        trimmed = "".join(f"; {i.trimmed}" for i in self.plan.items if i.trimmed)
        truth = (f"; {', '.join(judged_by_truth)} missed a bound of the case's, and are as "
                 f"close to the baseline run in float64 as the baseline's own rounding (plain "
                 f"and random) allows" if judged_by_truth else "")
        return Check("correct", True, f"{n} fresh draws x {len(self.plan.sets)} input sets "
                                      f"({', '.join(self.plan.sets)}) within tolerance; worst "
                                      f"rel err {worst:.3g}{trimmed}{truth}")

    def _structure(self, set_name: str) -> str:
        ref = (self.ref_resp.get("sets") or {}).get(set_name, {}).get("structure") or {}
        for f in self.forwards(set_name):
            odd = [t for t in f.get("output_types", []) if t != "torch.Tensor"]
            if odd:
                return (f"forward returned a {odd[0]}, not a plain torch.Tensor (a tensor "
                        f"subclass may compute when first touched, outside forward and "
                        f"outside any timer)")
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
                    if not o.dtype.is_floating_point or o.shape != r.shape or \
                            (id(o), id(r)) in self.finite_pairs:
                        continue
                    if bool(torch.isfinite(o).all()):  # one pass where nothing is NaN/Inf
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
            tol = self.tol()
            for j, (x, y) in enumerate(zip(a, b, strict=True)):
                n = _unlike_elements(x, y, tol.get(x.dtype))
                if n:
                    return Check("every_element_written", False,
                                 f"{set_name}: {n} of {x.numel()} elements of output[{j}] changed "
                                 f"with the poison pattern of fresh allocations (NaN vs -1234.5): "
                                 f"the kernel never writes them")
        return Check("every_element_written", True,
                     f"the same outputs on {self.plan.sets[0]} with fresh allocations poisoned "
                     f"by two patterns (NaN elsewhere), within the case's tolerance (a library "
                     f"op such as cuDNN's transposed convolution may differ in its last bits "
                     f"from run to run)")

    def depends_on_inputs(self) -> Check:
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
            _cmp, problem = self.compare(out, group)
            if problem:
                return Check("depends_on_inputs", False,
                             f"{set_name}: new values written into the same input storage: "
                             f"{problem}")
            draws = self.plan.draws[set_name]
            for g0, g1 in zip(draws, draws[1:], strict=False):
                o0, o1, r0, r1 = self.cand(f"cand-{g0}"), self.cand(f"cand-{g1}"), self.ref[g0], self.ref[g1]
                if o0 and o1 and r0 and r1 and len(o0) == len(o1) == len(r0) == len(r1):
                    for j in range(len(o0)):
                        if not bitwise_equal(r0[j], r1[j]) and bitwise_equal(o0[j], o1[j]):
                            return Check("depends_on_inputs", False,
                                         f"{set_name}: output[{j}] identical for different inputs")
        return Check("depends_on_inputs", True, "outputs follow new values written into the "
                                                "same input storage, and differ between draws")

    def no_mutation(self) -> Check:
        for set_name in self.plan.sets:
            for group in self.plan.draws[set_name] + [self.plan.inplace[set_name]]:
                post_file = self.out / f"post-{group}.safetensors"
                if f"post-{group}" in (self.resp.get("post_unchanged") or []):
                    continue  # bit-identical to the harness's copy, compared in the worker
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
            if set_name in (self.resp.get("weights_unchanged") or []):
                continue  # bit-identical to the staged state_dict, compared in the worker
            if weights:
                post = load_file(str(post_w)) if post_w.is_file() else {}
                for k, staged in weights.items():
                    if k.startswith(ATTRIBUTE_PREFIX):
                        continue  # state forward replaces (compared as an output instead)
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
                if f.get("previous_shares_storage"):
                    return Check("no_aliasing", False,
                                 f"{set_name}: a call returned storage that the previous call's "
                                 f"result still holds (the same output tensor on every call)")
        return Check("no_aliasing", True, "outputs share no storage with inputs, weights or "
                                          "the previous call's result")

    def triton_launched(self) -> Check:
        kernels: set[str] = set()
        for set_name in self.plan.sets:
            for f in self.forwards(set_name):
                if not f.get("launches"):
                    return Check("triton_launched", False,
                                 f"{set_name}: a forward launched no Triton kernel")
                kernels.update(f.get("kernels", []))
        for set_name in self.plan.sets:
            for f in self.forwards(set_name):
                ran = f.get("device_kernels")
                if ran is None:
                    continue  # the CPU interpreter, or no CUDA profiler here
                named = [k for k in f.get("kernels", []) if any(k in name for name in ran)]
                if not named:
                    return Check("triton_launched", False,
                                 f"{set_name}: the device's own trace (CUDA activity records) "
                                 f"shows none of the Triton kernels counted as launched "
                                 f"({', '.join(f.get('kernels', [])) or 'none'})")
        launches = [f["launches"] for s in self.plan.sets for f in self.forwards(s)]
        return Check("triton_launched", True, f"{', '.join(sorted(kernels))} "
                                              f"({min(launches)}-{max(launches)} launches per forward)")

    def no_pytorch_fallback(self) -> Check:
        remaining: set[str] = set()
        library: set[str] = set()
        worst = 0.0
        for set_name in self.plan.sets:
            ref_set = (self.ref_resp.get("sets") or {}).get(set_name, {})
            base = set(ref_set.get("compute_ops", []))
            # Library calls the baseline makes (GEMM, convolution, attention) may stay: the
            # share and the superset test look at the rest of the baseline's work.
            kept = library_ops_of(base)
            library_only = not (base - kept)
            if not library_only:
                base -= kept
            base_work = sum(n for op, n in (ref_set.get("compute_elements") or {}).items()
                            if op not in kept)
            library_work = sum(n for op, n in (ref_set.get("compute_elements") or {}).items()
                               if op in kept)
            library_share = 0.0
            """The most of the baseline's library work (elements) one forward still did."""
            ran: set[str] = set()
            for f in self.forwards(set_name):
                if f.get("hidden_ops"):
                    return Check("no_pytorch_fallback", False,
                                 f"{set_name}: PyTorch compute ops ran while the harness's op "
                                 f"recorder was switched off ({', '.join(f['hidden_ops'][:6])}; "
                                 f"seen by the profiler's C++ record)")
                ran.update(f.get("compute_ops", []))
                work = sum(n for op, n in (f.get("compute_elements") or {}).items()
                           if op not in kept)
                library_share = max(library_share, sum(
                    n for op, n in (f.get("compute_elements") or {}).items() if op in kept
                ) / library_work if library_work else 1.0)
                if base_work and work:
                    share = work / base_work
                    worst = max(worst, share)
                    if share >= FALLBACK_SHARE:
                        ops = ", ".join(sorted(set(f.get("compute_ops", [])) - kept))
                        return Check("no_pytorch_fallback", False,
                                     f"{set_name}: PyTorch compute ops ({ops}) touch "
                                     f"{share:.0%} of the elements the baseline's ops touch: "
                                     f"the work is done by PyTorch, not by the Triton kernel")
            replaced = library_only and library_share <= LIBRARY_REPLACED_SHARE
            if base and base <= ran and not replaced:
                return Check("no_pytorch_fallback", False,
                             f"{set_name}: still runs every PyTorch compute op the baseline runs "
                             f"({', '.join(sorted(base))}); a Triton kernel beside them is a decoy")
            remaining |= ran - kept
            library |= ran & kept
        share = f" ({worst:.0%} of the baseline's PyTorch work)" if remaining else ""
        if library:
            share += f"; library calls kept as the baseline makes them: {', '.join(sorted(library))}"
        return Check("no_pytorch_fallback", True,
                     f"PyTorch ops remaining: {', '.join(sorted(remaining)) or 'none'}{share}")
