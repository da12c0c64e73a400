"""Phase 4, the integrator: final verification and timing, report, archive, approval `pending`.

The accelerator's kernel is verified once more on every declared input set with fresh seeds
(the verifier draws new ones on every call), then timed against eager and torch.compile on
this machine. The report (`report.md` + a PNG chart) and the archive bundle are written,
and the run waits for the user's decision (`kopt approve` / `kopt reject`), which is
recorded in git and in this phase's manifest (`manifest.record_decision`).
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

from kopt.harness.paths import archive_dir
from kopt.phases.archive import ArchiveContents, archive_name, reproduce_text, write_archive
from kopt.phases.events import LOG, VERIFICATION, Event, EventSink
from kopt.phases.history import tip_commit
from kopt.phases.manifest import (
    FileRef,
    Manifest,
    check_handoff,
    manifest_path,
    read_manifest,
    write_manifest,
)
from kopt.phases.optimizer import load_records, speedup_of
from kopt.phases.outcome import KEEP_COMPILE, KEEP_PYTORCH, decide
from kopt.phases.report import render, write_chart
from kopt.phases.run import RunContext

PHASE = "integrator"


def _median(m: dict[str, Any]) -> float | None:
    if m.get("ok", True) and m.get("latency_ms"):
        return float(m["latency_ms"]["median"])
    return None


def _why_untimed(m: dict[str, Any], median: float | None) -> str | None:
    """Why a side-by-side variant has no median (the timer's refusal or the worker's error)."""
    return None if median is not None else str(m.get("error") or "no result")[:300]


def _time_side_by_side(ctx: RunContext, kernel: Path, accepted: bool,
                       events: EventSink) -> dict[str, dict[str, Any]]:
    """Eager, torch.compile and the final kernel timed side by side on this machine:
    `harness.bench.bench_case` (eager and compile share one worker, so torch.compile warms up
    once; the kernel in a second; no re-verification: it was just verified). Eager's and
    compile's rows timed in this workspace in the last ten minutes for the unchanged case are
    kept (`harness.bench.workspace_baselines`; their `timed_s_ago` says so). A test's fake
    harness (`ctx.measure`) times each variant on its own instead."""
    labels = ("final-eager", "final-compile", "final-kernel")
    if ctx.measure is not None:
        measured: dict[str, dict[str, Any]] = {}
        for variant, label in zip(("eager", "compile", kernel), labels, strict=True):
            if variant == kernel and not accepted:
                measured[label] = {"ok": False, "error": "not timed: final verification failed"}
                continue
            measured[label] = ctx.measure_variant(variant, label=label)
        return measured
    from kopt.harness.bench import bench_case, workspace_baselines

    events(Event(LOG, PHASE, f"timing eager, torch.compile and the kernel side by side "
                             f"({ctx.timing_label})"))
    rows = bench_case(ctx.case, [kernel] if accepted else [], device=ctx.device,
                      unverified=True,
                      target=ctx.clocked_target() if ctx.serial else ctx.config.target, input_set=ctx.input_set,
                      timing_options=ctx.timing_options, memo=workspace_baselines())
    kept = next((r["timed_s_ago"] for r in rows if r.get("timed_s_ago") is not None), None)
    if kept is not None:
        events(Event(LOG, PHASE, f"eager and torch.compile: kept from this workspace's bench "
                                 f"of the unchanged case {kept:.0f} s ago (ten minutes at most)"
                                 + ("; the kernel's output sample was checked against theirs"
                                    if accepted else "; no kernel timed")))
    out = {}
    for label, row in zip(labels, rows + [None] * (3 - len(rows)), strict=True):
        if row is None:
            out[label] = {"ok": False, "error": "not timed: final verification failed"}
            continue
        median, pct = row.get("median_ms"), row.get("pct_of_floor")
        out[label] = {"ok": median is not None, "variant": row["variant"],
                      "timing_label": row["timing_label"], "error": row.get("note") or None,
                      "latency_ms": {"median": median, "p20": row.get("p20_ms"),
                                     "p80": row.get("p80_ms")} if median else None,
                      "throughput": {"gbps": row.get("gbps"), "tflops": row.get("tflops")},
                      "roofline": {"pct_of_floor": pct,
                                   "floor_ms": pct * median / 100 if pct and median else None},
                      "source": "kopt.harness.bench.bench_case (side by side)",
                      "timed_s_ago": row.get("timed_s_ago")}
    return out


def run(ctx: RunContext, events: EventSink, cancel: threading.Event | None = None) -> Manifest:
    """Verify and time the final kernel, write the report and the archive."""
    acc = check_handoff(ctx.run_dir, "accelerator", run_id=ctx.run_id, root=ctx.root)
    kernel = ctx.root / acc.details["winner"]["kernel"]
    out_dir = ctx.phase_dir(PHASE)
    events(Event(LOG, PHASE, "final verification on every input set with fresh seeds"))
    report = ctx.verify_candidate(kernel)
    ctx.check_cancel()
    events(Event(VERIFICATION, PHASE, report.to_text(), report.to_dict()))
    ver_file = out_dir / "verification.json"
    ver_file.write_text(json.dumps(report.to_dict(), indent=1, default=str) + "\n")
    timing: dict[str, Any] = {"timing_label": ctx.timing_label, "input_set": ctx.input_set}
    measured = _time_side_by_side(ctx, kernel, bool(report.accepted), events)
    ctx.check_cancel()
    eager, compiled, cand = (_median(measured[k]) for k in
                             ("final-eager", "final-compile", "final-kernel"))
    roof = measured["final-kernel"].get("roofline") or {}
    timing.update({"eager_ms": eager, "compile_ms": compiled, "candidate_ms": cand,
                   "speedup_vs_eager": speedup_of(eager, cand),
                   "speedup_vs_compile": speedup_of(compiled, cand),
                   "pct_of_floor": roof.get("pct_of_floor"), "floor_ms": roof.get("floor_ms"),
                   "compile_error": _why_untimed(measured["final-compile"], compiled),
                   "eager_error": _why_untimed(measured["final-eager"], eager),
                   "candidate_error": _why_untimed(measured["final-kernel"], cand),
                   "baselines_timed_s_ago": measured["final-eager"].get("timed_s_ago")})
    (out_dir / "timing.json").write_text(json.dumps(measured, indent=1, default=str) + "\n")

    manifests = {p: read_manifest(manifest_path(ctx.run_dir, p))
                 for p in ("architect", "optimizer", "accelerator")}
    iterations = load_records(ctx.run_dir / "optimizer" / "iterations.jsonl")
    chart = write_chart(iterations, manifests["architect"].baseline_ms, ctx.timing_label,
                        out_dir / "chart.png")
    speedup = timing["speedup_vs_eager"]
    outcome = decide(verified=bool(report.accepted), timing_label=ctx.timing_label,
                     eager=measured["final-eager"].get("latency_ms"),
                     compiled=measured["final-compile"].get("latency_ms"),
                     candidate=measured["final-kernel"].get("latency_ms"))
    keep = {KEEP_PYTORCH: "pytorch", KEEP_COMPILE: "compile"}.get(outcome.verdict)
    events(Event(LOG, PHASE, f"outcome: {outcome.summary}"))

    def name_now() -> str:
        return archive_name(ctx.case.name, speedup, timing_label=ctx.timing_label, keep=keep)

    name = name_now()
    while (archive_dir() / name).exists():
        time.sleep(1.0)
        name = name_now()
    verification = {"accepted": bool(report.accepted), "input_sets":
                    list(getattr(report, "input_sets", []) or []),
                    "checks": report.to_dict().get("checks", []),
                    "file": FileRef.of(ver_file, ctx.root).path}
    text = render(manifests, iterations=iterations, verification=verification, timing=timing,
                  chart=chart.name if chart else None, archive_hint=f"archive/{name}",
                  outcome=outcome.to_dict())
    report_file = out_dir / "report.md"
    report_file.write_text(text)
    status = "verified" if report.accepted and cand is not None else "failed"
    if status == "failed":
        why = (f"final verification rejected the kernel ({', '.join(report.failed())})"
               if not report.accepted else f"the kernel was not timed: {timing['candidate_error']}")
        events(Event(LOG, PHASE, f"failed: {why}"))
    if eager is None:
        events(Event(LOG, PHASE, f"eager was not timed: {timing['eager_error']}"))
    manifest = Manifest(
        phase=PHASE, run_id=ctx.run_id, case=ctx.case.name, status=status, branch=ctx.branch,
        commit=tip_commit(ctx.worktree), baseline_ms=eager, best_ms=cand, speedup=speedup,
        timing_label=ctx.timing_label,
        inputs=[FileRef.of(manifest_path(ctx.run_dir, "accelerator"), ctx.root)],
        outputs=[FileRef.of(f, ctx.root) for f in (kernel, report_file, ver_file)
                 + ((chart,) if chart else ())],
        details={"verification": verification, "timing": timing,
                 "outcome": outcome.to_dict(),
                 "report": FileRef.of(report_file, ctx.root).path,
                 "chart": FileRef.of(chart, ctx.root).path if chart else None,
                 "archive": str(Path("archive") / name),
                 "approval": {"state": "pending", "commit": acc.details["winner"]["commit"],
                              "reason": None, "decision_commit": None, "at": None}})
    path = write_manifest(manifest, manifest_path(ctx.run_dir, PHASE))
    reproduce = reproduce_text(ctx.case.name, ctx.case.directory, ctx.run_id, ctx.branch,
                               acc.details["winner"]["commit"], f"{ctx.case.name}.py",
                               ctx.timing_label)
    final = write_archive(ArchiveContents(
        case=ctx.case.name, run_id=ctx.run_id, speedup=speedup, kernel=kernel,
        manifests=[manifest_path(ctx.run_dir, p) for p in manifests] + [path],
        report=report_file, chart=chart, run_dir=ctx.run_dir, reproduce=reproduce),
        archive_dir(), name=name)
    events(Event(LOG, PHASE, f"archive: {final}"))
    return manifest
