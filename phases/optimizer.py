"""Phase 2, the optimizer (Triton Code Engineer): candidates for the plan, verified, committed.

Each round asks the engineer (`phases.engineers`) for a candidate; every verification of a
candidate -- by the phase, or by an LLM engineer through `Toolbox.verify` inside its round --
is one iteration: the kernel is written to `kernels/<case>.py` in the run's worktree, verified
(`harness.verify.verify_candidate`), timed when accepted, and committed with its
verification and metrics JSON and the measured evidence in the message. The verifier's
report of a rejected candidate is the next round's feedback; the first round's feedback is
the user's reason when they rejected the previous run of this case. The fastest accepted
candidate is the phase's result.

Iterations are appended to `manifests/<run-id>/optimizer/iterations.jsonl` as they are
committed, so a run killed mid-phase resumes with the rounds it already did.
"""

from __future__ import annotations

import json
import shutil
import threading
from pathlib import Path
from typing import Any

from kopt.harness.errors import BadInputError, EngineerError
from kopt.harness.speedup import CPU_VERIFIED, beats, format_speedup, speed_measured
from kopt.phases import strategy_memory
from kopt.phases.engineers.base import EngineerRequest, Proposal, Toolbox, VerifyResult
from kopt.phases.events import ITERATION, LOG, VERIFICATION, Event, EventSink
from kopt.phases.history import commit_iteration, get_run, list_runs, tip_commit
from kopt.phases.manifest import FileRef, Manifest, check_handoff, sha256_file
from kopt.phases.run import RunContext
from kopt.phases.strategy import Hypothesis, ProfileFacts, facts_of, pick_next
from kopt.phases.tuning_memory import kernel_pattern

PHASE = "optimizer"
AUTHORS = ("offline", "anthropic", "replay", "user")
PATIENCE = 2
"""The strategy walk stops after this many hypotheses in a row gained nothing over the
timer's noise on the best kernel so far (a rejected candidate gains nothing), counting those
the strategy memory settled when it knows of no hypothesis that won."""
AT_FLOOR_PCT = 90.0
"""The strategy walk stops once the best verified kernel runs at this share of the roofline
floor or more: what is left to gain (at most the distance to the floor) is about what the
accelerator's launch search and the timer's noise decide, so a round that rewrites the kernel
costs a verification and a timing (~10 s on a GPU) for nothing it could show."""


def checks_summary(report: Any) -> dict[str, Any]:
    checks = list(getattr(report, "checks", []))
    return {"passed": sum(1 for c in checks if c.passed),
            "failed": [c.name for c in checks if not c.passed]}


def speedup_of(baseline_ms: float | None, median_ms: float | None) -> float | None:
    if not baseline_ms or not median_ms:
        return None
    return baseline_ms / median_ms


def _author(engineer: Any) -> str:
    name = str(getattr(engineer, "name", "offline")).split(":")[0]
    return name if name in AUTHORS else "user"


def previous_rejection(case: str, run_id: str, root: Path) -> str | None:
    """The user's reason, when they rejected the latest earlier run of this case."""
    try:
        runs = [r for r in list_runs(case, root) if r.run_id != run_id]
    except Exception:  # noqa: BLE001 - no history is no feedback
        return None
    for r in reversed(runs):
        if r.approval.get("state") == "rejected":
            return (f"The user rejected run {r.run_id}'s kernel "
                    f"(commit {str(r.approval.get('commit'))[:10]}): {r.approval.get('reason')}")
        if r.approval.get("state") == "approved":
            return None
    return None


class IterationRecorder:
    """Verifies, times and commits candidates of one run; the `Toolbox` engineers see."""

    def __init__(self, ctx: RunContext, events: EventSink, baseline_ms: float,
                 author: str, phase: str = PHASE) -> None:
        self.ctx = ctx
        self.events = events
        self.baseline_ms = baseline_ms
        self.author = author
        self.phase = phase
        self.dir = ctx.phase_dir(PHASE)
        self.log = self.dir / "iterations.jsonl"
        self.records: list[dict[str, Any]] = load_records(self.log)
        self.round = 0
        self.notes = ""
        self.hypothesis: str | None = None
        """The name of the hypothesis this round tests (the offline strategy space), or None."""
        self.settled: dict[str, str] = {}
        """Hypotheses not tested because the strategy memory says they lost: name -> why."""
        self.profiles: dict[int, dict[str, Any]] = {}
        """Per iteration, the profile its own timing job took (GPU only): the next round's
        facts read it from here instead of timing the same kernel again in a second job."""
        self.profiled = ctx.device == "cuda"
        """Whether an accepted candidate's timing job also profiles it (after its timed loop,
        so the figure is the same). The CPU interpreter's profile would time the interpreter."""
        # a kill between a commit and its record leaves an iteration only git knows about
        self.committed = max((i.iteration for i in get_run(ctx.run_id, ctx.root).iterations),
                             default=0)

    @property
    def next_iteration(self) -> int:
        return max([r["iteration"] for r in self.records] + [self.committed]) + 1

    def toolbox(self) -> Toolbox:
        return Toolbox(verify=self.verify, profile=self.profile)

    def _kernel_path(self) -> Path:
        return self.ctx.worktree / self.ctx.kernel_rel

    def verify(self, rel: str) -> VerifyResult:
        """Verify the candidate at `rel` (in the worktree), time it if accepted, commit it."""
        ctx = self.ctx
        src = (ctx.worktree / rel).resolve()
        if not src.is_relative_to(ctx.worktree.resolve()) or not src.is_file():
            text = f"loads: FAIL: no candidate file {rel!r} in the worktree"
            return VerifyResult(False, text, {"accepted": False, "checks": []})
        kernel = self._kernel_path()
        kernel.parent.mkdir(parents=True, exist_ok=True)
        if src != kernel.resolve():
            shutil.copyfile(src, kernel)
        self.events(Event(LOG, self.phase, f"iteration {self.next_iteration}: verifying "
                                           f"{ctx.kernel_rel}"))
        report = ctx.verify_candidate(kernel)
        ctx.check_cancel()
        metrics = None
        if report.accepted:
            metrics = ctx.measure_variant(kernel, label=f"iter-{self.next_iteration}",
                                          **self._profile_kw())
            ctx.check_cancel()
        return self.record(report, metrics)

    def _profile_kw(self) -> dict[str, Any]:
        return {"profile": True} if self.profiled else {}

    def verify_many(self, rels: list[str]) -> list[VerifyResult]:
        """Verify several candidates at once (one per free slot of the run), time the accepted
        ones the same way, then commit each in the order of `rels` -- never in the order they
        finished. A file repeated within `rels` is verified once."""
        ctx = self.ctx
        results: list[VerifyResult | None] = [None] * len(rels)
        staged: dict[int, Path] = {}
        same_as: dict[int, int] = {}
        by_digest: dict[str, int] = {}
        for k, rel in enumerate(rels):
            src = (ctx.worktree / rel).resolve()
            if not src.is_relative_to(ctx.worktree.resolve()) or not src.is_file():
                results[k] = VerifyResult(False, f"loads: FAIL: no candidate file {rel!r} in the "
                                                 "worktree", {"accepted": False, "checks": []})
                continue
            digest = sha256_file(src)
            if digest in by_digest:
                same_as[k] = by_digest[digest]
                continue
            by_digest[digest] = k
            # a snapshot: the files may be rewritten while others are verified and committed
            staged[k] = self.dir / f"round-{self.round}-candidate-{k}.py"
            shutil.copyfile(src, staged[k])
        order = sorted(staged)
        first = self.next_iteration
        if order:
            where = "" if ctx.serial else f" on {len(ctx.slots())} slots"
            self.events(Event(LOG, self.phase, f"iterations {first}-{first + len(order) - 1}: "
                                               f"verifying {len(order)} candidate(s){where}"))
        reports = ctx.verify_candidates([staged[k] for k in order]) if order else []
        ctx.check_cancel()
        accepted = [i for i, report in enumerate(reports) if report.accepted]
        timed = ctx.measure_variants([(staged[order[i]], f"iter-{first + i}") for i in accepted],
                                     **self._profile_kw())
        ctx.check_cancel()
        metrics = dict(zip(accepted, timed, strict=True))
        kernel = self._kernel_path()
        kernel.parent.mkdir(parents=True, exist_ok=True)
        for i, (k, report) in enumerate(zip(order, reports, strict=True)):
            shutil.copyfile(staged[k], kernel)
            results[k] = self.record(report, metrics.get(i))
        for k, original in same_as.items():
            results[k] = results[original]
        return [r for r in results if r is not None]

    def record(self, report: Any, metrics: dict[str, Any] | None) -> VerifyResult:
        """Commit the kernel now at `kernels/<case>.py` with its verdict and timing."""
        ctx = self.ctx
        kernel = self._kernel_path()
        n = self.next_iteration
        report_dict = report.to_dict()
        self.events(Event(VERIFICATION, self.phase, report.to_text(), report_dict))
        base = kernel.with_suffix("")
        (base.parent / f"{base.name}.verification.json").write_text(
            json.dumps(report_dict, indent=1, default=str) + "\n")
        metrics_file = base.parent / f"{base.name}.metrics.json"
        median = speedup = pct = None
        if report.accepted and metrics is not None:
            if metrics.get("ok", True) and metrics.get("latency_ms"):
                median = float(metrics["latency_ms"]["median"])
                speedup = speedup_of(self.baseline_ms, median)
                pct = (metrics.get("roofline") or {}).get("pct_of_floor")
            metrics_file.write_text(json.dumps(metrics, indent=1, default=str) + "\n")
        elif metrics_file.exists():
            metrics_file.unlink()
        summary = checks_summary(report)
        accepted = bool(report.accepted and median is not None)
        if accepted and speed_measured(ctx.timing_label):
            subject = (f"{self.phase}: {ctx.case.name} iter {n} - "
                       f"{format_speedup(speedup, ctx.timing_label)} vs eager, verified")
        elif accepted:
            subject = f"{self.phase}: {ctx.case.name} iter {n} - {CPU_VERIFIED}"
        if accepted:
            evidence = (f"{median:.4g} ms vs {self.baseline_ms:.4g} ms eager "
                        f"({ctx.timing_label}, {ctx.input_set} inputs"
                        + (f", {pct:.1f}% of floor" if pct is not None else "") + ")")
        else:
            why = ", ".join(summary["failed"]) or "timing failed"
            subject = f"{self.phase}: {ctx.case.name} iter {n} - rejected ({why})"
            evidence = "verification: " + ("; ".join(
                line for line in report.to_text().splitlines() if "FAIL" in line)[:1500]
                or str((metrics or {}).get("error")))
        body = evidence + (f"\n\n{self.notes.strip()[:2000]}" if self.notes.strip() else "")
        commit = commit_iteration(
            ctx.worktree, run_id=ctx.run_id, phase=self.phase, iteration=n, case=ctx.case.name,
            subject=subject, body=body, speedup=speedup if accepted else None,
            pct_of_floor=pct if accepted else None, verified=accepted, author=self.author,
            candidate=ctx.kernel_rel, paths=["kernels"], timing_label=ctx.timing_label,
            extra={"Hypothesis": self.hypothesis} if self.hypothesis else None)
        copy = self.dir / f"iter-{n}.py"
        shutil.copyfile(kernel, copy)
        record = {"iteration": n, "round": self.round, "commit": commit,
                  "hypothesis": self.hypothesis,
                  "candidate": ctx.kernel_rel, "kernel": str(copy),
                  "verdict": "accepted" if accepted else "rejected", "checks": summary,
                  "median_ms": median, "speedup": speedup, "pct_of_floor": pct,
                  "author": self.author, "phase": self.phase, "report_text": report.to_text()}
        self.records.append(record)
        if accepted and isinstance((metrics or {}).get("profile"), dict):
            self.profiles[n] = metrics["profile"]
        with open(self.log, "a") as f:
            f.write(json.dumps(record, default=str) + "\n")
        self.events(Event(ITERATION, self.phase, subject, {
            "iteration": n, "commit": commit, "author": self.author, "speedup": speedup,
            "pct_of_floor": pct, "verdict": record["verdict"], "candidate": ctx.kernel_rel}))
        return VerifyResult(accepted, report.to_text(), report_dict, commit,
                            {"median_ms": median, "speedup": speedup, "pct_of_floor": pct}
                            if accepted else None)

    def record_cancelled(self, rel: str) -> str | None:
        """Commit the engineer's partial candidate at `rel`, unverified, marked cancelled
        (SPEC: a cancelled iteration is kept). None when there is no such file."""
        ctx = self.ctx
        src = (ctx.worktree / rel).resolve()
        if not src.is_relative_to(ctx.worktree.resolve()) or not src.is_file():
            return None
        kernel = self._kernel_path()
        kernel.parent.mkdir(parents=True, exist_ok=True)
        if src != kernel.resolve():
            shutil.copyfile(src, kernel)
        n = self.next_iteration
        subject = f"{self.phase}: {ctx.case.name} iter {n} - cancelled (not verified)"
        body = "The user stopped the run while the engineer was writing this candidate." + (
            f"\n\n{self.notes.strip()[:2000]}" if self.notes.strip() else "")
        commit = commit_iteration(
            ctx.worktree, run_id=ctx.run_id, phase=self.phase, iteration=n, case=ctx.case.name,
            subject=subject, body=body, verified=False, author=self.author,
            candidate=ctx.kernel_rel, paths=["kernels"], extra={"Cancelled": "yes"})
        copy = self.dir / f"iter-{n}.py"
        shutil.copyfile(kernel, copy)
        record = {"iteration": n, "round": self.round, "commit": commit,
                  "candidate": ctx.kernel_rel, "kernel": str(copy), "verdict": "cancelled",
                  "checks": {"passed": 0, "failed": []}, "median_ms": None, "speedup": None,
                  "pct_of_floor": None, "author": self.author, "phase": self.phase,
                  "report_text": "cancelled before verification"}
        self.records.append(record)
        with open(self.log, "a") as f:
            f.write(json.dumps(record, default=str) + "\n")
        self.events(Event(ITERATION, self.phase, subject, {
            "iteration": n, "commit": commit, "author": self.author, "speedup": None,
            "pct_of_floor": None, "verdict": "cancelled", "candidate": ctx.kernel_rel}))
        return commit

    def profile(self, rel: str) -> dict[str, Any]:
        path = (self.ctx.worktree / rel).resolve()
        if not path.is_relative_to(self.ctx.worktree.resolve()) or not path.is_file():
            return {"ok": False, "error": f"no candidate file {rel!r} in the worktree"}
        m = self.ctx.measure_variant(path, profile=True, label=f"profile-{path.stem}")
        if m.get("latency_ms"):
            m["speedup"] = speedup_of(self.baseline_ms, m["latency_ms"]["median"])
        return m


def load_records(log: Path) -> list[dict[str, Any]]:
    """Iterations recorded so far (a line cut short by a kill is dropped)."""
    if not log.is_file():
        return []
    out = []
    for line in log.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


def best_record(records: list[dict[str, Any]]) -> dict[str, Any] | None:
    ok = [r for r in records if r["verdict"] == "accepted"]
    return max(ok, key=lambda r: r["speedup"] or 0.0) if ok else None


def _at_floor(records: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The fastest verified iteration when it runs at AT_FLOOR_PCT of the floor or more."""
    best = best_record(records)
    pct = (best or {}).get("pct_of_floor")
    return best if pct is not None and pct >= AT_FLOOR_PCT else None


def _feedback_after(result: VerifyResult | None, proposal: Proposal) -> str:
    if result is None:
        return "The previous round produced no candidate file. " + (proposal.notes or "")[-500:]
    if not result.accepted:
        return result.report_text
    m = result.metrics or {}
    pct = m.get("pct_of_floor")
    return (f"The previous candidate was accepted at {m.get('speedup') or 0:.2f}x vs eager"
            + (f" ({pct:.1f}% of the roofline floor)" if pct is not None else "")
            + ". Make it faster without changing its results.")


def _repeats_accepted(records: list[dict[str, Any]], worktree: Path,
                      proposal: Proposal) -> int | None:
    """The iteration whose accepted kernel has the same bytes as the proposed candidate."""
    if proposal.verified is not None or not proposal.candidate:
        return None
    file = worktree / proposal.candidate
    if not file.is_file():
        return None
    digest = sha256_file(file)
    for r in records:
        if r.get("verdict") == "accepted" and Path(r["kernel"]).is_file() \
                and sha256_file(Path(r["kernel"])) == digest:
            return int(r["iteration"])
    return None


def _best_of(results: list[VerifyResult]) -> VerifyResult | None:
    """The fastest accepted result of a round, else its first (the engineer's main one)."""
    accepted = [r for r in results if r.accepted]
    if accepted:
        return max(accepted, key=lambda r: (r.metrics or {}).get("speedup") or 0.0)
    return results[0] if results else None


def _round_log(dir: Path) -> Path:
    return dir / "rounds.jsonl"


def run(ctx: RunContext, events: EventSink, cancel: threading.Event | None = None) -> Manifest:
    """Ask the engineer for candidates, verify and commit each, keep the fastest accepted."""
    architect = check_handoff(ctx.run_dir, "architect", run_id=ctx.run_id, root=ctx.root)
    baseline_ms = float(architect.baseline_ms or 0.0)
    ctx.check_timing_gpu()
    plan = architect.details["plan"]
    engineer = ctx.make_engineer()
    author = _author(engineer)
    rec = IterationRecorder(ctx, events, baseline_ms, author)
    rounds = load_records(_round_log(rec.dir))
    done = max((r["round"] for r in rounds), default=0)
    if done:
        events(Event(LOG, PHASE, f"resuming after round {done} of {ctx.config.iterations} "
                                 f"({len(rec.records)} iteration(s) committed)"))
    user_feedback = previous_rejection(ctx.case.name, ctx.run_id, ctx.root)
    feedback = rounds[-1].get("feedback_next") if rounds else user_feedback
    previous = ctx.worktree / ctx.kernel_rel
    baseline_info = {k: architect.details[k] for k in ("baseline", "profile", "model_summary",
                                                       "roofline")}
    # the strategy space (phases.strategy): the offline engineer tests one hypothesis a
    # round, picked from the last iteration's profile; an LLM engineer gets the same facts.
    # The CPU interpreter measures no speed, so no hypothesis could be judged there: a CPU
    # run verifies the engineer's own candidates only.
    walk = author == "offline" and speed_measured(ctx.timing_label)
    tried = {str(r["hypothesis"]) for r in rounds if r.get("hypothesis")}
    kernels = next((r["kernels"] for r in reversed(rounds) if r.get("kernels")), [])
    bound = (architect.details.get("roofline") or {}).get("bound")
    stop = False
    recalled = False
    idle = 0  # hypotheses in a row that gained nothing (PATIENCE)
    for round_no in range(done + 1, ctx.config.iterations + 1):
        ctx.check_cancel()
        rec.round = round_no
        before = len(rec.records)
        best_before = (best_record(rec.records) or {}).get("median_ms")
        if walk and not recalled and rec.records:
            recalled = True
            idle += _skip_settled(ctx, rec, events, tried)
        at_floor = _at_floor(rec.records) if walk else None
        if at_floor is not None:
            events(Event(LOG, PHASE, f"round {round_no}: iteration {at_floor['iteration']} "
                                     f"runs at {at_floor['pct_of_floor']:.1f}% of the roofline "
                                     f"floor (at least {AT_FLOOR_PCT:.0f}%): no hypothesis has "
                                     "more than that distance to gain; stopping the optimizer"))
            break
        if walk and idle >= PATIENCE:
            events(Event(LOG, PHASE, f"round {round_no}: the last {idle} hypotheses gained "
                                     "nothing over the timer's noise on the best kernel so far"
                                     " (strategy memory included); stopping the optimizer"))
            break
        facts = _profile_facts(ctx, rec, kernels, bound) if rec.records else None
        hypothesis = pick_next(facts, tried) if walk and facts is not None else None
        if walk and facts is not None and hypothesis is None:
            events(Event(LOG, PHASE, f"round {round_no}: every hypothesis of the strategy space "
                                     "was tested; stopping the optimizer"))
            break
        while True:  # a hypothesis that yields an already verified kernel gives way to the next
            options = {**ctx.config.engineer_options, "phase": PHASE}
            if facts is not None:
                options["profile_facts"] = facts.to_dict()
                options["profile_facts_text"] = facts.text()
            rec.hypothesis = hypothesis.name if hypothesis else None
            if hypothesis is not None:
                tried.add(hypothesis.name)
                options.update({**hypothesis.options, "hypothesis": hypothesis.name})
                hot = (facts.hot or {}) if facts else {}
                events(Event(LOG, PHASE, f"round {round_no}/{ctx.config.iterations}: testing "
                                         f"{hypothesis.name!r}"
                                         + (f" (hottest kernel {hot.get('name')}, "
                                            f"{hot.get('kind')}" + (f", {bound}-bound" if bound
                                                                     else "") + ")"
                                            if hot else "")))
            else:
                events(Event(LOG, PHASE, f"round {round_no}/{ctx.config.iterations}: asking the "
                                         f"{author} engineer"))
            request = EngineerRequest(
                case=ctx.case, worktree=ctx.worktree, plan=plan, iteration=round_no,
                toolbox=rec.toolbox(), feedback=feedback,
                previous=Path(ctx.kernel_rel) if previous.is_file() else None,
                baseline=baseline_info, cancel=ctx.cancel, run_dir=ctx.run_dir,
                options=options)
            try:
                with ctx.breakdown.engineer():
                    proposal = engineer.propose(request, events)
            except (EngineerError, BadInputError) as err:
                events(Event(LOG, PHASE, f"round {round_no}: the engineer failed: "
                                         f"{err.one_line()}"))
                proposal = Proposal(candidate=None, notes=f"engineer error: {err.one_line()}")
            rec.notes = _hypothesis_notes(hypothesis, facts) + proposal.notes
            kernels = proposal.kernels or kernels
            if proposal.cancelled or ctx.cancel.is_set():
                # keep the partial iteration as a commit marked cancelled, then stop
                committed = rec.records[-1]["kernel"] if rec.records else None
                if proposal.candidate and (ctx.worktree / proposal.candidate).is_file() and (
                        committed is None or sha256_file(ctx.worktree / proposal.candidate)
                        != sha256_file(Path(committed))):
                    rec.record_cancelled(proposal.candidate)
                ctx.cancel.set()
                ctx.check_cancel()
            repeat = _repeats_accepted(rec.records[:before], ctx.worktree, proposal)
            if repeat is None or proposal.alternatives:
                break
            nxt = pick_next(facts, tried) if walk and facts is not None else None
            if nxt is not None:
                events(Event(LOG, PHASE, f"round {round_no}: {hypothesis.name if hypothesis else 'the engineer'!s}"
                                         f" gives the kernel of iteration {repeat} again; "
                                         f"trying {nxt.name!r}"))
                hypothesis = nxt
                continue
            # a deterministic engineer with nothing new to try: verifying and committing the
            # same bytes again would only spend the budget (and add an empty iteration)
            events(Event(LOG, PHASE, f"round {round_no}: the {author} engineer proposed the "
                                     f"kernel of iteration {repeat} again (already verified); "
                                     "stopping the optimizer early"))
            entry = {"round": round_no, "candidate": proposal.candidate,
                     "notes": f"same kernel as iteration {repeat}: stopped early",
                     "unfused": proposal.unfused, "tunables": proposal.tunables,
                     "usage": proposal.usage, "transcript": proposal.transcript,
                     "iterations": [], "feedback_next": feedback, "kernels": kernels,
                     "hypothesis": hypothesis.name if hypothesis else None}
            rounds.append(entry)
            with open(_round_log(rec.dir), "a") as f:
                f.write(json.dumps(entry, default=str) + "\n")
            stop = True
            break
        if stop:
            break
        result: VerifyResult | None = None
        done_before = False
        if proposal.verified is not None and len(rec.records) > before and proposal.candidate \
                and (ctx.worktree / proposal.candidate).is_file() \
                and sha256_file(ctx.worktree / proposal.candidate) == \
                sha256_file(Path(rec.records[-1]["kernel"])):
            result = proposal.verified  # the engineer verified (and committed) this one
            done_before = True
        elif proposal.candidate and not proposal.alternatives:
            result = rec.verify(proposal.candidate)
        if proposal.alternatives:  # several candidates this round: evaluated at once
            main = [] if done_before or repeat is not None or not proposal.candidate \
                else [proposal.candidate]
            results = ([result] if result else []) + rec.verify_many(main + proposal.alternatives)
            result = _best_of(results)
        feedback = _feedback_after(result, proposal)
        if hypothesis is not None:
            now = (best_record(rec.records[before:]) or {}).get("median_ms")
            idle = 0 if best_before and beats(now, best_before) else idle + 1
        entry = {"round": round_no, "candidate": proposal.candidate, "notes": proposal.notes[-2000:],
                 "unfused": proposal.unfused, "tunables": proposal.tunables,
                 "usage": proposal.usage, "transcript": proposal.transcript,
                 "iterations": [r["iteration"] for r in rec.records[before:]],
                 "feedback_next": feedback, "kernels": kernels,
                 "hypothesis": hypothesis.name if hypothesis else None,
                 "hypothesis_options": hypothesis.options if hypothesis else None,
                 "hypothesis_why": hypothesis.why if hypothesis else None,
                 "facts": facts.to_dict() if facts else None}
        if proposal.alternatives:
            entry["alternatives"] = list(proposal.alternatives)
        rounds.append(entry)
        with open(_round_log(rec.dir), "a") as f:
            f.write(json.dumps(entry, default=str) + "\n")
    if walk:
        _remember_walk(ctx, rec, rounds)
    return _manifest(ctx, architect, rec, rounds, user_feedback)


def _walk_key(ctx: RunContext, rec: IterationRecorder) -> tuple[str, str, str, dict[str, Any]] | None:
    """(GPU, pattern of the first candidate, shape bucket, its record) for the strategy
    memory; None when the first round's candidate was not accepted and timed."""
    first = rec.records[0] if rec.records else None
    if not first or first.get("hypothesis") or first.get("verdict") != "accepted" \
            or not first.get("median_ms"):
        return None
    try:
        source = Path(first["kernel"]).read_text()
        gpu = ctx.timing_gpu()
    except (OSError, RuntimeError, AssertionError):  # no GPU model to keep it by
        return None
    return gpu, kernel_pattern(source, None), ctx.shape_bucket(), first


def _skip_settled(ctx: RunContext, rec: IterationRecorder, events: EventSink,
                  tried: set[str]) -> int:
    """Hypotheses the strategy memory says lost from this first candidate on this GPU and
    shapes: marked tried, each with the evidence in the log. How many count toward PATIENCE:
    all of them, unless the memory knows of one that won (tested again first)."""
    key = _walk_key(ctx, rec)
    entry = strategy_memory.recall(*key[:3]) if key else None
    if entry is None:
        return 0
    settled = strategy_memory.settled(entry)
    for name, why in settled.items():
        if name not in tried:
            tried.add(name)
            rec.settled[name] = why
            events(Event(LOG, PHASE, f"strategy memory: not testing {name!r} again ({why} on "
                                     f"{key[0]}, run {entry.get('run_id')} of "
                                     f"{entry.get('date')})"))
    won = set(entry["results"]) - set(settled)
    return 0 if won else len(settled)


def _remember_walk(ctx: RunContext, rec: IterationRecorder, rounds: list[dict[str, Any]]) -> None:
    """What each hypothesis tested in this run measured (its round's fastest accepted
    iteration; None when none was), kept by GPU, first candidate and shapes."""
    key = _walk_key(ctx, rec)
    if key is None:
        return
    gpu, pattern, bucket, first = key
    by_iteration = {r["iteration"]: r for r in rec.records}
    results: dict[str, float | None] = {}
    for r in rounds:
        name = r.get("hypothesis")
        if not name or not r.get("iterations"):
            continue
        medians = [by_iteration[i]["median_ms"] for i in r["iterations"]
                   if i in by_iteration and by_iteration[i].get("verdict") == "accepted"
                   and by_iteration[i].get("median_ms")]
        results[str(name)] = min(medians) if medians else None
    if results:
        strategy_memory.remember(gpu, pattern, bucket, float(first["median_ms"]), results,
                                 {"case": ctx.case.name, "run_id": ctx.run_id,
                                  "commit": first.get("commit")})


def _profile_facts(ctx: RunContext, rec: IterationRecorder, kernels: list[dict[str, Any]],
                   bound: str | None) -> ProfileFacts:
    """The last iteration's facts; on a GPU its accepted kernel is profiled (per-kernel device
    time); the CPU interpreter's profile would time the interpreter, so there the facts hold
    the kernels' kinds and the roofline's bound only."""
    last = rec.records[-1]
    profile = rec.profiles.get(int(last["iteration"]))  # taken by the iteration's own timing
    if profile is None and ctx.device == "cuda" and last.get("verdict") == "accepted" \
            and Path(last["kernel"]).is_file():  # e.g. a resumed run: profile it now
        m = ctx.measure_variant(Path(last["kernel"]), profile=True,
                                label=f"profile-iter-{last['iteration']}")
        profile = m.get("profile")
        ctx.check_cancel()
    return facts_of(last, kernels, profile, bound)


def _hypothesis_notes(hypothesis: Hypothesis | None, facts: ProfileFacts | None) -> str:
    """The commit body's first lines: the hypothesis tested and the facts that chose it."""
    if hypothesis is None:
        return ""
    text = f"Hypothesis: {hypothesis.name} ({hypothesis.why})"
    if facts is not None and facts.text():
        text += "\nChosen from: " + facts.text().replace("\n", " ")
    return text + "\n\n"


def _manifest(ctx: RunContext, architect: Manifest, rec: IterationRecorder,
              rounds: list[dict[str, Any]], user_feedback: str | None) -> Manifest:
    best = best_record(rec.records)
    out_dir = rec.dir
    outputs: list[FileRef] = []
    best_info = None
    tunables: dict[str, Any] = {}
    unfused: list[dict[str, Any]] = []
    for r in rounds:
        unfused = r.get("unfused") or unfused
    if best is not None:
        best_file = out_dir / "best.py"
        shutil.copyfile(best["kernel"], best_file)
        outputs.append(FileRef.of(best_file, ctx.root))
        for r in rounds:
            if best["iteration"] in r.get("iterations", []):
                tunables = r.get("tunables") or {}
                unfused = r.get("unfused") or unfused
        best_info = {"iteration": best["iteration"], "commit": best["commit"],
                     "kernel": outputs[0].path, "median_ms": best["median_ms"],
                     "speedup": best["speedup"], "pct_of_floor": best["pct_of_floor"]}
    usage: dict[str, Any] = {}
    for r in rounds:
        for k, v in (r.get("usage") or {}).items():
            if isinstance(v, int | float):
                usage[k] = usage.get(k, 0) + v
    iterations = [{k: r[k] for k in ("iteration", "commit", "candidate", "verdict", "checks",
                                     "median_ms", "speedup", "pct_of_floor", "author", "phase")}
                  for r in rec.records]
    commit = tip_commit(ctx.worktree)
    return Manifest(
        phase=PHASE, run_id=ctx.run_id, case=ctx.case.name,
        status="verified" if best is not None else "failed", branch=ctx.branch, commit=commit,
        baseline_ms=architect.baseline_ms, best_ms=best["median_ms"] if best else None,
        speedup=best["speedup"] if best else None, timing_label=architect.timing_label,
        inputs=[FileRef.of(ctx.run_dir / "architect.json", ctx.root)], outputs=outputs,
        details={"engineer": ctx.config.engineer,
                 "budget": {"rounds": ctx.config.iterations, "rounds_run": len(rounds)},
                 "feedback": user_feedback, "iterations": iterations, "best": best_info,
                 "unfused": [u for u in unfused if isinstance(u, dict) and "op" in u],
                 "tunables": tunables, "usage": usage,
                 "transcripts": sorted({str(r["transcript"]) for r in rounds
                                        if r.get("transcript")}),
                 "hypotheses": [{"round": r["round"], "name": r["hypothesis"],
                                 "options": r.get("hypothesis_options") or {},
                                 "why": r.get("hypothesis_why") or ""}
                                for r in rounds if r.get("hypothesis")],
                 "settled_by_memory": [{"name": k, "why": v} for k, v in rec.settled.items()]})

