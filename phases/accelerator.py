"""Phase 3, the accelerator: a measured search over the kernel's declared launch parameters.

A kernel declares what may be tuned with two module-level literals:

    KOPT_TUNABLES = {"BLOCK_ROWS": [1, 2, 4], "num_warps": [2, 4, 8]}   # the search space
    KOPT_CONFIG = {"BLOCK_ROWS": 2, "num_warps": 4}                     # what it launches with

(and reads its launch parameters from `KOPT_CONFIG`), or the same per kernel, as the
offline engineer writes them: `KOPT_TUNABLES = {"_k": {"BLOCK_SIZE": [1024, 2048]}}`,
`KOPT_CONFIG = {"_k": {"BLOCK_SIZE": 1024}}`. A kernel without them may still be
tuned through the engineer's `Proposal.tunables` (module-level constants such as
`BLOCK_SIZE = 1024`): each trial rewrites those constants instead.

On a GPU the kernels are tuned each on its own (`phases.search`: a coordinate search, one
parameter at a time with the others at their best, a dimension stopped when a step gains under
the timer's noise, then a joint check of the winners against the default); every trial is
timed and output-checked in `harness.tune` jobs and the winner is fully verified before it
counts (the next fastest if the verifier rejects it). A kernel that matches an entry of the
tuning memory (`phases.tuning_memory`: per GPU model, kernel pattern and shape bucket) starts
from it, after timing it against its own default; the winners are remembered with their
evidence. Without a GPU, timings would be interpreter timings, so the phase verifies the
default configuration only and says so in the manifest.
"""

from __future__ import annotations

import json
import shutil
import threading
import time
from pathlib import Path
from typing import Any

from kopt.harness.errors import ManifestError
from kopt.phases import tuning_memory
from kopt.phases.engineers.offline.regions import apply_region_choices, is_region_key, region_space
from kopt.phases.events import LOG, Event, EventSink
from kopt.phases.history import tip_commit
from kopt.phases.manifest import FileRef, Manifest, check_handoff, sha256_file
from kopt.phases.optimizer import IterationRecorder, checks_summary, speedup_of
from kopt.phases.run import RunContext
from kopt.phases.search import CoordinateSearch, dimensions, kernel_of, time_files
from kopt.phases.source_edit import literal, replace_value
from kopt.phases.strategy_memory import versions

PHASE = "accelerator"
MAX_TRIALS = 40
"""Timed configurations per run on a GPU (a coordinate search of three kernels with two
parameters each takes ~12-20; each is a timed run in a `tune` job, not a verification)."""
NO_GPU = "no GPU: default configuration verified only"
"""(by the optimizer: the accelerator keeps its verdict; the integrator verifies again)"""
SEP = "/"
"""Joins a kernel's name and its parameter in the flattened search space of a per-kernel
`KOPT_TUNABLES = {"_k": {"BLOCK_SIZE": [...]}}`."""
TUNE_BUDGET_S = 60.0
"""Wall time one tuning job may spend timing its trials on a GPU (later trials are skipped)."""
MAX_FULL_VERIFICATIONS = 2
"""Full verifications on a GPU: the fastest checked trial, and the next if it is rejected."""


def search_space(source: str, tunables: dict[str, list[Any]] | None) -> tuple[str, dict[str, list[Any]], dict[str, Any]]:
    """(style, space, default config): style `config` (KOPT_TUNABLES/KOPT_CONFIG), `constants`
    (module-level constants from the engineer's tunables) or `none`."""
    declared = literal(source, "KOPT_TUNABLES")
    if isinstance(declared, dict) and declared:
        current = literal(source, "KOPT_CONFIG")
        if all(isinstance(v, dict) for v in declared.values()):  # per kernel: {kernel: {p: [..]}}
            space = {f"{k}{SEP}{p}": list(vals) for k, params in declared.items()
                     for p, vals in params.items()}
            nested = current if isinstance(current, dict) else {}
            default = {key: (nested.get(key.split(SEP)[0]) or {}).get(key.split(SEP)[1],
                                                                      space[key][0])
                       for key in space}
            # regions first: which regions run in Triton decides what is worth tuning
            regions = region_space(source)
            return ("config", {**regions, **space},
                    {**{k: v[0] for k, v in regions.items()}, **default})
        default = current if isinstance(current, dict) else {k: v[0] for k, v in declared.items()}
        return "config", {k: list(v) for k, v in declared.items()}, dict(default)
    space = {}
    default = {}
    for name, values in (tunables or {}).items():
        current = literal(source, name)
        if current is not None and isinstance(values, list) and values:
            space[name] = list(values)
            default[name] = current
    return ("constants" if space else "none"), space, default


def apply_config(source: str, style: str, config: dict[str, Any]) -> str:
    """`source` with `config` written in; raises EngineerError for a configuration that runs
    every region in PyTorch (that is the baseline, not a candidate)."""
    if style == "config":
        source = apply_region_choices(source, config)
        config = {k: v for k, v in config.items() if not is_region_key(k)}
        if any(SEP in k for k in config):  # per-kernel KOPT_CONFIG: keep its other entries
            nested = literal(source, "KOPT_CONFIG") or {}
            nested = {k: dict(v) for k, v in nested.items()}
            for key, value in config.items():
                kernel, param = key.split(SEP, 1)
                nested.setdefault(kernel, {})[param] = value
            return replace_value(source, "KOPT_CONFIG", nested)
        return replace_value(source, "KOPT_CONFIG", config)
    for name, value in config.items():
        source = replace_value(source, name, value)
    return source


def run(ctx: RunContext, events: EventSink, cancel: threading.Event | None = None) -> Manifest:
    """Tune the optimizer's best kernel (GPU), or verify its default configuration (CPU)."""
    optimizer = check_handoff(ctx.run_dir, "optimizer", run_id=ctx.run_id, root=ctx.root)
    best = optimizer.details.get("best")
    ctx.check_timing_gpu()
    if not best:
        raise ManifestError(f"{ctx.run_dir / 'optimizer.json'}: /details/best is null",
                            fix="the optimizer found no accepted candidate; re-run it")
    started = time.monotonic()
    source = (ctx.root / best["kernel"]).read_text()
    style, space, default = search_space(source, optimizer.details.get("tunables"))
    out_dir = ctx.phase_dir(PHASE)
    on_gpu = ctx.device == "cuda"
    space_size = 1
    for v in space.values():
        space_size *= len(v)
    steps: list[dict[str, Any]] = []
    memory: dict[str, Any] = {}
    if on_gpu and space:
        kernels = [k or "the kernel" for k, _keys in dimensions(space)]
        events(Event(LOG, PHASE, f"coordinate search over {len(kernels)} kernel(s), each on "
                                 f"its own: {', '.join(kernels)} ({len(space)} parameter(s))"))
        trials, winner, files, steps, memory = _coordinate(ctx, events, optimizer, source,
                                                           style, space, default, out_dir)
    else:
        events(Event(LOG, PHASE, NO_GPU if not on_gpu else
                     "the kernel declares no tunables: verifying it as it is"))
        files = [out_dir / "trial-0.py"]
        files[0].write_text(source)
        trials, winner = _verify_default(ctx, events, optimizer, [default], files)
    if winner is None:
        for t in trials:
            t.pop("report", None), t.pop("metrics", None)
        return _failed(ctx, optimizer, trials, space, space_size, started, on_gpu)
    index = trials.index(winner)
    win_file = files[index]
    kernel_file = out_dir / "kernel.py"
    shutil.copyfile(win_file, kernel_file)

    worktree_kernel = ctx.worktree / ctx.kernel_rel
    changed = not worktree_kernel.is_file() or sha256_file(worktree_kernel) != sha256_file(win_file)
    commit = best["commit"]
    if changed:  # commit the winner as an iteration (a tuned config, or the best of several)
        rec = IterationRecorder(ctx, events, float(optimizer.baseline_ms or 0), "offline",
                                phase=PHASE)
        rec.author = (optimizer.details["iterations"][-1].get("author", "offline")
                      if optimizer.details["iterations"] else "offline")
        rec.notes = (f"launch configuration {winner['config']} ("
                     + (f"coordinate search, {len(trials)} trial(s)" if on_gpu else NO_GPU) + ")"
                     + "".join(f"\n- {s['kernel'] or 'kernel'} {s['param']}: {s['from']} -> "
                               f"{s['to']} ({s['stopped']})" for s in steps))
        shutil.copyfile(win_file, worktree_kernel)
        commit = rec.record(winner["report"], winner["metrics"]).commit
    remembered = None
    if on_gpu and space and winner.get("median_ms"):
        remembered = str(_remember(ctx, source, space, winner, commit, optimizer, steps))
    for t in trials:
        t.pop("report", None), t.pop("metrics", None)
    seconds = time.monotonic() - started
    median = winner["median_ms"]
    return Manifest(
        phase=PHASE, run_id=ctx.run_id, case=ctx.case.name, status="verified",
        branch=ctx.branch, commit=tip_commit(ctx.worktree), baseline_ms=optimizer.baseline_ms,
        best_ms=median, speedup=speedup_of(optimizer.baseline_ms, median),
        timing_label=optimizer.timing_label,
        inputs=[FileRef.of(ctx.run_dir / "optimizer.json", ctx.root)],
        outputs=[FileRef.of(kernel_file, ctx.root)],
        details={"gpu": ctx.timing_gpu() if on_gpu else NO_GPU, "tunables": space,
                 "budget": _budget(on_gpu, trials, space_size, seconds),
                 "trials": trials,
                 "winner": {"config": winner["config"], "kernel": FileRef.of(kernel_file,
                                                                             ctx.root).path,
                            "median_ms": median, "speedup": winner["speedup"],
                            "commit": commit, "changed": winner["config"] != default},
                 "remembered": remembered, "memory": memory, "search": steps})


def _kernel_dimensions(space: dict[str, list[Any]]) -> list[tuple[str, list[str]]]:
    """The kernels' launch parameters (the tuning memory's business), without the regions'
    Triton-or-PyTorch dimensions (a property of the candidate, not of a kernel)."""
    return [(k, keys) for k, keys in dimensions(space) if not any(map(is_region_key, keys))]


def _recall(ctx: RunContext, events: EventSink, source: str, space: dict[str, list[Any]],
            default: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any],
                                              dict[str, tuple[dict[str, Any], list[Any]]]]:
    """The default with every remembered kernel's winner in place, what was recalled, and the
    neighbours of each winner that gained nothing when it won (`CoordinateSearch.settled`:
    only with the same torch and Triton versions)."""
    gpu, bucket = ctx.timing_gpu(), ctx.shape_bucket()
    config, recalled = dict(default), {}
    settled: dict[str, tuple[dict[str, Any], list[Any]]] = {}
    for kernel, keys in _kernel_dimensions(space):
        pattern = tuning_memory.kernel_pattern(source, kernel or None)
        entry = tuning_memory.recall(gpu, pattern, bucket)
        if entry is None:
            continue
        params = {(f"{kernel}{SEP}{p}" if kernel else p): v for p, v in entry["config"].items()}
        usable = {k: v for k, v in params.items() if k in keys and v in space[k]}
        if not usable:
            continue
        config.update(usable)
        recalled[kernel or "kernel"] = {"pattern": pattern, "bucket": bucket, **entry}
        if len(usable) == len(keys) and all(entry.get(k) == v for k, v in versions().items()):
            for param, values in (entry.get("settled") or {}).items():
                key = f"{kernel}{SEP}{param}" if kernel else param
                if key in keys and isinstance(values, list):
                    settled[key] = (usable, values)
        shown = {k.split(SEP)[-1]: v for k, v in usable.items()}
        events(Event(LOG, PHASE, f"tuning memory: {kernel or 'the kernel'} starts from {shown} "
                                 f"(won at {entry.get('median_ms')} ms on {entry.get('date')}, "
                                 f"case {entry.get('case')}, commit "
                                 f"{str(entry.get('commit'))[:10]}); re-timed against the "
                                 "default"))
    return config, recalled, settled


def _remember(ctx: RunContext, source: str, space: dict[str, list[Any]],
              winner: dict[str, Any], commit: str | None, optimizer: Manifest,
              steps: list[dict[str, Any]]) -> Path:
    """Each kernel's winning parameters, with their evidence, in the tuning memory; with
    `settled`: per parameter, the values a step tried from the winning value that gained
    nothing (the search's steps that ended there)."""
    gpu, bucket = ctx.timing_gpu(), ctx.shape_bucket()
    file = tuning_memory.gpu_file(gpu)
    for kernel, keys in _kernel_dimensions(space):
        settled: dict[str, list[Any]] = {}
        for step in steps:
            key = f"{kernel}{SEP}{step['param']}" if kernel else step["param"]
            if (step.get("kernel") or "") != kernel or key not in keys:
                continue
            won = winner["config"][key]
            if step.get("from") == won and step.get("to") == won:  # timed now, or settled before
                settled.setdefault(step["param"], [])
                settled[step["param"]] += [v for v in [*(step.get("tried") or []),
                                                       *(step.get("settled") or [])]
                                           if v != won and v not in settled[step["param"]]]
        entry = {"config": {k.split(SEP)[-1]: winner["config"][k] for k in keys},
                 "median_ms": winner.get("median_ms"), "baseline_ms": optimizer.baseline_ms,
                 "commit": commit, "case": ctx.case.name, "kernel": kernel or None,
                 "run_id": ctx.run_id, "settled": settled, **versions()}
        file = tuning_memory.remember(gpu, tuning_memory.kernel_pattern(source, kernel or None),
                                      bucket, entry)
    return file


def _coordinate(ctx: RunContext, events: EventSink, optimizer: Manifest, source: str,
                style: str, space: dict[str, list[Any]], default: dict[str, Any],
                out_dir: Path) -> tuple[list[dict[str, Any]], dict[str, Any] | None, list[Path],
                                        list[dict[str, Any]], dict[str, Any]]:
    """GPU: the coordinate search (`phases.search`), every trial timed and output-checked in
    `harness.tune` jobs; then the winner is fully verified (the default needs none: it is the
    optimizer's verified kernel); if the verifier rejects it, the next fastest."""
    files: dict[str, Path] = {}

    def file_of(config: dict[str, Any]) -> Path:
        key = _key(config)
        if key not in files:
            f = out_dir / f"trial-{len(files)}.py"
            f.write_text(source if config == default or style == "none"
                         else apply_config(source, style, config))
            files[key] = f
        return files[key]

    def time_configs(configs: list[dict[str, Any]], what: str) -> list[dict[str, Any]]:
        ctx.check_cancel()
        rows, paths = time_files(configs, file_of,
                                 lambda files: ctx.time_trials(files, budget_s=TUNE_BUDGET_S))
        for config, path, t in zip(configs, paths, rows, strict=True):
            median = t.get("median_ms") if t.get("checked") else None
            t["source"] = path
            events(Event(LOG, PHASE, f"  {what} {_short(config)}: " + (
                f"{median:.4g} ms, output matches" if median else
                f"rejected ({str(t.get('detail'))[:120]})")))
        return rows

    remembered, recalled, settled = _recall(ctx, events, source, space, default)
    search = CoordinateSearch(space, time_configs, max_trials=MAX_TRIALS,
                              log=lambda m: events(Event(LOG, PHASE, m)), settled=settled)
    starts = [("default", default)] + ([("remembered", remembered)]
                                       if remembered != default else [])
    # the optimizer timed these very bytes (iteration `best`): with nothing left to try from
    # them (the remembered winner, every neighbour settled) that timing stands
    start, row = search.start(starts, known=_optimizer_row(optimizer, file_of(default)))
    best, _row = search.run(start, row)
    keep, _keep_row = search.joint_check(default, best)
    ctx.check_cancel()

    trials: list[dict[str, Any]] = []
    for t in search.trials:
        if t.get("source") is None:  # refused before timing (every region in PyTorch)
            continue
        median = t.get("median_ms") if t.get("checked") else None
        path = Path(t["source"])
        trials.append({"config": t["config"], "verdict": "checked" if median else "rejected",
                       "failed": [] if median else [str(t.get("detail"))[:300]],
                       "median_ms": median, "p20_ms": t.get("p20_ms"), "p80_ms": t.get("p80_ms"),
                       "speedup": speedup_of(optimizer.baseline_ms, median),
                       "source": FileRef.of(path, ctx.root).path, "checked": bool(median),
                       "check": str(t.get("detail"))[:300], "fully_verified": False,
                       "step": t.get("step"), "report": None, "metrics": None,
                       **{k: t[k] for k in ("host", "gpu", "timing_source") if k in t}})
    paths = [ctx.root / t["source"] for t in trials]
    # each configuration by its last timing; full verification tries the kept one first,
    # then the other checked ones by speed; the optimizer's default closes the list
    last = {_key(t["config"]): t for t in trials}
    ranked = sorted((t for t in last.values() if t["median_ms"] and t["config"] != default),
                    key=lambda t: t["median_ms"])
    if keep != default:
        ranked.remove(last[_key(keep)])
        ranked.insert(0, last[_key(keep)])
    else:
        ranked = []
    verifications = 0
    for t in ranked:
        if verifications == MAX_FULL_VERIFICATIONS:
            break
        i = trials.index(t)
        events(Event(LOG, PHASE, f"full verification of {_short(t['config'])}"))
        report = ctx.verify_candidate(paths[i])
        ctx.check_cancel()
        verifications += 1
        t["fully_verified"] = True
        t["report"] = report
        if report.accepted:
            t["verdict"] = "accepted"
            t["metrics"] = _trial_metrics(ctx, t)
            return trials, t, paths, search.steps, recalled
        t["verdict"] = "rejected"
        t["failed"] = checks_summary(report)["failed"]
    chosen = last.get(_key(default))
    if chosen is None:
        return trials, None, paths, search.steps, recalled
    chosen["verdict"] = "accepted"  # the optimizer's kernel, already verified in full
    chosen["report"] = _VerifiedBefore()
    if not chosen["median_ms"]:  # the tune job could not time it: the optimizer's timing
        chosen["median_ms"] = optimizer.details["best"].get("median_ms")
        chosen["speedup"] = speedup_of(optimizer.baseline_ms, chosen["median_ms"])
    chosen["metrics"] = _trial_metrics(ctx, chosen)
    return trials, chosen, paths, search.steps, recalled


def _key(config: dict[str, Any]) -> str:
    return json.dumps(config, sort_keys=True, default=str)


def _optimizer_row(optimizer: Manifest, source: Path) -> dict[str, Any]:
    """A timing row for the optimizer's best kernel from the optimizer's own timing."""
    best = optimizer.details["best"]
    return {"checked": True, "median_ms": best.get("median_ms"), "p20_ms": None, "p80_ms": None,
            "detail": f"the optimizer's timing (iteration {best['iteration']})",
            "source": source, "timing_source": f"optimizer iteration {best['iteration']} "
                                                "(its measure job)"}


def _short(config: dict[str, Any]) -> str:
    one_kernel = len({kernel_of(k) for k in config}) == 1
    return "{" + ", ".join(f"{k.split(SEP)[-1] if one_kernel else k}={v}"
                           for k, v in config.items()) + "}"


def _trial_metrics(ctx: RunContext, t: dict[str, Any]) -> dict[str, Any]:
    return {"ok": True, "timing_label": ctx.timing_label, "input_set": ctx.input_set,
            "latency_ms": {"median": t["median_ms"], "p20": t.get("p20_ms") or t["median_ms"],
                           "p80": t.get("p80_ms") or t["median_ms"]},
            "source": t.get("timing_source") or "accelerator tune job (harness.tune)"}


def _budget(on_gpu: bool, trials: list[dict[str, Any]], space_size: int,
            seconds: float) -> dict[str, Any]:
    return {"max_trials": MAX_TRIALS if on_gpu else 1, "trials_run": len(trials),
            "space_size": space_size, "seconds": round(seconds, 3),
            "time_budget_s": TUNE_BUDGET_S if on_gpu else None,
            "timed_and_checked": sum(1 for t in trials if t.get("checked") is not None),
            "fully_verified": [i for i, t in enumerate(trials) if t.get("fully_verified")],
            "method": ("coordinate search: each kernel's parameters one at a time, the "
                       "others at their best, a dimension stopped when a step gains under the "
                       "timer's noise; a joint check of the winners; every trial timed and "
                       "output-checked in tune jobs; full verification of the winner")
            if on_gpu and len(trials) > 1
            else (NO_GPU if not on_gpu else "one configuration")}


class _VerifiedBefore:
    """The optimizer's verification of the unchanged default configuration (no new run)."""

    accepted = True
    checks: list[Any] = []

    def to_dict(self) -> dict[str, Any]:
        return {"accepted": True, "checks": [], "note": "verified by the optimizer"}

    def to_text(self) -> str:
        return "verified by the optimizer (unchanged default configuration)"


def _verify_default(ctx: RunContext, events: EventSink, optimizer: Manifest,
                    configs: list[dict[str, Any]], files: list[Path]
                    ) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """Nothing to search (the CPU, or a kernel without tunables): keep the optimizer's verdict
    and timing of this very kernel, with no second verification. On the CPU a second run of
    the verifier on the same bytes (and another interpreter timing, which measures no speed)
    cost a sixth of a run's wall time and told nothing new; the integrator verifies the final
    kernel again with fresh seeds."""
    if ctx.device == "cuda" or optimizer.details["best"].get("median_ms") is not None:
        best = optimizer.details["best"]
        median = best.get("median_ms")
        t = {"config": configs[0], "verdict": "accepted", "failed": [], "median_ms": median,
             "speedup": speedup_of(optimizer.baseline_ms, median),
             "source": FileRef.of(files[0], ctx.root).path, "checked": None,
             "fully_verified": False, "report": _VerifiedBefore(),
             "metrics": {"ok": True, "timing_label": ctx.timing_label,
                         "latency_ms": {"median": median, "p20": median, "p80": median},
                         "source": "the optimizer's timing of this kernel"}}
        events(Event(LOG, PHASE, "nothing to tune: the optimizer's verified kernel as it is"
                     + (" (its verdict and timing kept)" if ctx.device != "cuda" else "")))
        return [t], t
    reports = ctx.verify_candidates(files[:1])
    ctx.check_cancel()
    report = reports[0]
    median = m = None
    if report.accepted:
        m = ctx.measure_variant(files[0], label="trial-0")
        ctx.check_cancel()
        if m.get("ok", True) and m.get("latency_ms"):
            median = float(m["latency_ms"]["median"])
    t = {"config": configs[0], "verdict": "accepted" if report.accepted else "rejected",
         "failed": checks_summary(report)["failed"], "median_ms": median,
         "speedup": speedup_of(optimizer.baseline_ms, median),
         "source": FileRef.of(files[0], ctx.root).path, "checked": None,
         "fully_verified": True, "report": report, "metrics": m}
    events(Event(LOG, PHASE, f"trial 0 {configs[0]}: {t['verdict']}"
                             + (f", {median:.4g} ms" if median else "")))
    return [t], (t if report.accepted and median is not None else None)


def _failed(ctx: RunContext, optimizer: Manifest, trials: list[dict[str, Any]],
            space: dict[str, list[Any]], space_size: int, started: float,
            on_gpu: bool) -> Manifest:
    return Manifest(
        phase=PHASE, run_id=ctx.run_id, case=ctx.case.name, status="failed", branch=ctx.branch,
        commit=tip_commit(ctx.worktree), baseline_ms=optimizer.baseline_ms, best_ms=None,
        speedup=None, timing_label=optimizer.timing_label,
        inputs=[FileRef.of(ctx.run_dir / "optimizer.json", ctx.root)], outputs=[],
        details={"gpu": ctx.timing_gpu() if on_gpu else NO_GPU, "tunables": space,
                 "budget": _budget(on_gpu, trials, space_size, time.monotonic() - started),
                 "trials": trials,
                 "winner": {"config": {}, "kernel": "", "median_ms": None, "commit": None,
                            "changed": False}})
