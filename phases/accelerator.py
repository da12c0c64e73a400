"""Phase 3, the accelerator: a measured search over the kernel's declared launch parameters.

A kernel declares what may be tuned with two module-level literals:

    KOPT_TUNABLES = {"BLOCK_ROWS": [1, 2, 4], "num_warps": [2, 4, 8]}   # the search space
    KOPT_CONFIG = {"BLOCK_ROWS": 2, "num_warps": 4}                     # what it launches with

(and reads its launch parameters from `KOPT_CONFIG`), or the same per kernel, as the
offline engineer writes them: `KOPT_TUNABLES = {"_k": {"BLOCK_SIZE": [1024, 2048]}}`,
`KOPT_CONFIG = {"_k": {"BLOCK_SIZE": 1024}}`. A kernel without them may still be
tuned through the engineer's `Proposal.tunables` (module-level constants such as
`BLOCK_SIZE = 1024`): each trial rewrites those constants instead.

On a GPU every trial (at most `max_trials`, the default configuration and the winner
remembered for this GPU/case/shape first) is verified -- all on the same fresh draws, with one
reference run -- and the accepted ones are timed; the fastest is written back into the kernel
source and committed. Winners are remembered per GPU in `.kopt/cache/tuning/<gpu>.json`.
Without a GPU, timings would be interpreter timings, so the phase verifies the default
configuration only and says so in the manifest.
"""

from __future__ import annotations

import ast
import itertools
import json
import shutil
import threading
import time
from pathlib import Path
from typing import Any

from kopt.harness.errors import ManifestError
from kopt.phases.events import LOG, Event, EventSink
from kopt.phases.history import tip_commit
from kopt.phases.manifest import FileRef, Manifest, check_handoff, sha256_file
from kopt.phases.optimizer import IterationRecorder, checks_summary, speedup_of
from kopt.phases.run import RunContext

PHASE = "accelerator"
MAX_TRIALS = 12
"""Trials per run on a GPU: 12 x (verify + time) of a memory-bound kernel is ~2 minutes."""
NO_GPU = "no GPU: default configuration verified only"
SEP = "/"
"""Joins a kernel's name and its parameter in the flattened search space of a per-kernel
`KOPT_TUNABLES = {"_k": {"BLOCK_SIZE": [...]}}`."""
TUNE_BUDGET_S = 60.0
"""Wall time the tuning worker may spend timing trials on a GPU (later trials are skipped)."""
MAX_FULL_VERIFICATIONS = 2
"""Full verifications on a GPU: the fastest checked trial, and the next if it is rejected."""
MIN_GAIN = 0.02
"""A tuned configuration must beat the default by 2% (timing noise) to replace it."""


def literal(source: str, name: str) -> Any:
    """The value of module-level `name = <literal>` in `source`, or None."""
    node = _assignment(source, name)
    if node is None:
        return None
    try:
        return ast.literal_eval(node.value)
    except ValueError:
        return None


def _assignment(source: str, name: str) -> ast.Assign | None:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    for node in tree.body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name) and node.targets[0].id == name):
            return node
    return None


def replace_value(source: str, name: str, value: Any) -> str:
    """`source` with the literal assigned to module-level `name` replaced by `repr(value)`."""
    node = _assignment(source, name)
    if node is None:
        raise ValueError(f"no module-level assignment to {name}")
    lines = source.splitlines(keepends=True)
    v = node.value
    start = sum(len(line) for line in lines[: v.lineno - 1]) + _byte_col(lines[v.lineno - 1],
                                                                          v.col_offset)
    end = sum(len(line) for line in lines[: v.end_lineno - 1]) + _byte_col(
        lines[v.end_lineno - 1], v.end_col_offset)
    return source[:start] + repr(value) + source[end:]


def _byte_col(line: str, col: int) -> int:
    """ast columns count UTF-8 bytes; the string index of that column."""
    return len(line.encode()[:col].decode(errors="ignore"))


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
            return "config", space, default
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
    if style == "config":
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


def trial_configs(space: dict[str, list[Any]], default: dict[str, Any],
                  remembered: dict[str, Any] | None, max_trials: int) -> list[dict[str, Any]]:
    """The default first, the remembered winner second, then an even spread of the rest."""
    names = sorted(space)
    every = [dict(zip(names, combo, strict=True)) for combo in itertools.product(*(space[n] for n in names))]
    chosen = [default]
    if remembered and set(remembered) == set(names) and remembered != default:
        chosen.append(remembered)
    for name in names:  # a kernel's BACKEND alternatives (offline matmuls) are always measured
        if name.rsplit(SEP, 1)[-1] == "BACKEND":
            alternatives = [c for c in ({**default, name: v} for v in space[name]) if c not in chosen]
            chosen += alternatives[: max(0, max_trials - len(chosen))]
    rest = [c for c in every if c not in chosen]
    room = max(0, max_trials - len(chosen))
    if rest and room:
        step = max(1, len(rest) / room)
        chosen += [rest[int(i * step)] for i in range(min(room, len(rest)))]
    return chosen


def _memory_file(ctx: RunContext) -> Path:
    from kopt.harness.paths import cache_dir

    name = "cpu"
    if ctx.device == "cuda":
        name = _timing_gpu(ctx).replace(" ", "_").replace("/", "_")
    return cache_dir() / "tuning" / f"{name}.json"


def _memory_key(ctx: RunContext, space: dict[str, list[Any]]) -> str:
    shapes = [s.shape for s in ctx.case.input_set(ctx.input_set).tensor_specs()]
    return f"{ctx.case.name}|{shapes}|{','.join(sorted(space))}"


def recall(ctx: RunContext, space: dict[str, list[Any]]) -> dict[str, Any] | None:
    file = _memory_file(ctx)
    try:
        return json.loads(file.read_text()).get(_memory_key(ctx, space))
    except (OSError, ValueError):
        return None


def remember(ctx: RunContext, space: dict[str, list[Any]], config: dict[str, Any]) -> Path:
    file = _memory_file(ctx)
    file.parent.mkdir(parents=True, exist_ok=True)
    try:
        data = json.loads(file.read_text())
    except (OSError, ValueError):
        data = {}
    data[_memory_key(ctx, space)] = config
    tmp = file.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
    tmp.replace(file)
    return file


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
    remembered = recall(ctx, space) if space else None
    if on_gpu and space:
        configs = trial_configs(space, default, remembered, MAX_TRIALS)[:MAX_TRIALS]
    else:
        configs = [default]
    space_size = 1
    for v in space.values():
        space_size *= len(v)
    events(Event(LOG, PHASE, (f"searching {len(configs)} of {space_size} configuration(s) of "
                              f"{', '.join(sorted(space))}") if on_gpu and space else
                 (f"{NO_GPU}" if not on_gpu else "the kernel declares no tunables: "
                                                  "verifying it as it is")))
    files = []
    for i, config in enumerate(configs):
        trial = out_dir / f"trial-{i}.py"
        trial.write_text(source if i == 0 or style == "none" else apply_config(source, style, config))
        files.append(trial)
    ctx.check_cancel()
    if on_gpu and len(configs) > 1:
        trials, winner = _search(ctx, events, optimizer, configs, files)
    else:
        trials, winner = _verify_default(ctx, events, optimizer, configs, files)
    if winner is None:
        for t in trials:
            t.pop("report", None), t.pop("metrics", None)
        return _failed(ctx, optimizer, trials, space, space_size, started, on_gpu)
    index = trials.index(winner)
    win_file = files[index]
    kernel_file = out_dir / "kernel.py"
    shutil.copyfile(win_file, kernel_file)
    memory = str(remember(ctx, space, winner["config"])) if on_gpu and space else None

    worktree_kernel = ctx.worktree / ctx.kernel_rel
    changed = not worktree_kernel.is_file() or sha256_file(worktree_kernel) != sha256_file(win_file)
    commit = best["commit"]
    if changed:  # commit the winner as an iteration (a tuned config, or the best of several)
        rec = IterationRecorder(ctx, events, float(optimizer.baseline_ms or 0), "offline",
                                phase=PHASE)
        rec.author = (optimizer.details["iterations"][-1].get("author", "offline")
                      if optimizer.details["iterations"] else "offline")
        rec.notes = (f"launch configuration {winner['config']} "
                     f"({'measured best of ' + str(len(trials)) if on_gpu else NO_GPU})")
        shutil.copyfile(win_file, worktree_kernel)
        commit = rec.record(winner["report"], winner["metrics"]).commit
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
        details={"gpu": _timing_gpu(ctx) if on_gpu else NO_GPU, "tunables": space,
                 "budget": _budget(on_gpu, trials, space_size, seconds),
                 "trials": trials,
                 "winner": {"config": winner["config"], "kernel": FileRef.of(kernel_file,
                                                                             ctx.root).path,
                            "median_ms": median, "speedup": winner["speedup"],
                            "commit": commit, "changed": index != 0},
                 "remembered": memory})


def _budget(on_gpu: bool, trials: list[dict[str, Any]], space_size: int,
            seconds: float) -> dict[str, Any]:
    return {"max_trials": MAX_TRIALS if on_gpu else 1, "trials_run": len(trials),
            "space_size": space_size, "seconds": round(seconds, 3),
            "time_budget_s": TUNE_BUDGET_S if on_gpu else None,
            "timed_and_checked": sum(1 for t in trials if t.get("checked") is not None),
            "fully_verified": [i for i, t in enumerate(trials) if t.get("fully_verified")],
            "method": ("every trial timed and output-checked in one worker job; full "
                       "verification of the winner only") if on_gpu and len(trials) > 1
            else (NO_GPU if not on_gpu else "one configuration")}


def _search(ctx: RunContext, events: EventSink, optimizer: Manifest,
            configs: list[dict[str, Any]], files: list[Path]
            ) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """GPU: time and output-check every trial in one worker job, then fully verify the
    fastest (the default needs none: it is the optimizer's verified kernel); if the verifier
    rejects it, the next fastest."""
    timed = ctx.time_trials(files, budget_s=TUNE_BUDGET_S)
    ctx.check_cancel()
    trials = []
    for i, (config, file, t) in enumerate(zip(configs, files, timed, strict=True)):
        median = t.get("median_ms") if t.get("checked") else None
        trials.append({"config": config, "verdict": "checked" if median else "rejected",
                       "failed": [] if median else [str(t.get("detail"))[:300]],
                       "median_ms": median, "p20_ms": t.get("p20_ms"), "p80_ms": t.get("p80_ms"),
                       "speedup": speedup_of(optimizer.baseline_ms, median),
                       "source": FileRef.of(file, ctx.root).path, "checked": bool(median),
                       "check": str(t.get("detail"))[:300], "fully_verified": False,
                       "report": None, "metrics": None,
                       # which host and GPU timed it, when the trials were spread over slots
                       **{k: t[k] for k in ("host", "gpu") if k in t}})
        events(Event(LOG, PHASE, f"trial {i} {config}: "
                                 + (f"{median:.4g} ms, output matches" if median else
                                    f"rejected ({str(t.get('detail'))[:120]})")))
    ranked = sorted((t for t in trials if t["median_ms"]), key=lambda t: t["median_ms"])
    default = trials[0]
    if default["median_ms"] and ranked and ranked[0] is not default and \
            ranked[0]["median_ms"] > default["median_ms"] * (1 - MIN_GAIN):
        ranked.remove(default)
        ranked.insert(0, default)  # within noise of the default: keep the default
    verifications = 0
    for t in ranked:
        t["metrics"] = {"ok": True, "timing_label": ctx.timing_label, "input_set": ctx.input_set,
                        "latency_ms": {"median": t["median_ms"], "p20": t["p20_ms"],
                                       "p80": t["p80_ms"]},
                        "source": "accelerator tune job (all trials in one worker)"}
        if t is default:  # the optimizer's kernel, already verified in full
            t["verdict"] = "accepted"
            t["report"] = _VerifiedBefore()
            return trials, t
        if verifications == MAX_FULL_VERIFICATIONS:
            break
        i = trials.index(t)
        events(Event(LOG, PHASE, f"full verification of trial {i} {t['config']}"))
        report = ctx.verify_candidate(files[i])
        ctx.check_cancel()
        verifications += 1
        t["fully_verified"] = True
        t["report"] = report
        if report.accepted:
            t["verdict"] = "accepted"
            return trials, t
        t["verdict"] = "rejected"
        t["failed"] = checks_summary(report)["failed"]
    return trials, None


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
    """CPU: verify and time the default configuration. A GPU with nothing to tune keeps the
    optimizer's verdict and timing of this very kernel (no second verification)."""
    if ctx.device == "cuda":
        best = optimizer.details["best"]
        median = best.get("median_ms")
        t = {"config": configs[0], "verdict": "accepted", "failed": [], "median_ms": median,
             "speedup": speedup_of(optimizer.baseline_ms, median),
             "source": FileRef.of(files[0], ctx.root).path, "checked": None,
             "fully_verified": False, "report": _VerifiedBefore(),
             "metrics": {"ok": True, "timing_label": ctx.timing_label,
                         "latency_ms": {"median": median, "p20": median, "p80": median},
                         "source": "the optimizer's timing of this kernel"}}
        events(Event(LOG, PHASE, "nothing to tune: the optimizer's verified kernel as it is"))
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


def _gpu_name() -> str:
    import torch

    return torch.cuda.get_device_name(0)


def _timing_gpu(ctx: RunContext) -> str:
    """The GPU model that timed the trials: the run's timing slots' (a remote GPU through
    ssh or ray), else this machine's."""
    from kopt.harness.parallel import gpu_model

    return gpu_model(ctx.timing_slots()[0]) or _gpu_name()


def _failed(ctx: RunContext, optimizer: Manifest, trials: list[dict[str, Any]],
            space: dict[str, list[Any]], space_size: int, started: float,
            on_gpu: bool) -> Manifest:
    return Manifest(
        phase=PHASE, run_id=ctx.run_id, case=ctx.case.name, status="failed", branch=ctx.branch,
        commit=tip_commit(ctx.worktree), baseline_ms=optimizer.baseline_ms, best_ms=None,
        speedup=None, timing_label=optimizer.timing_label,
        inputs=[FileRef.of(ctx.run_dir / "optimizer.json", ctx.root)], outputs=[],
        details={"gpu": _timing_gpu(ctx) if on_gpu else NO_GPU, "tunables": space,
                 "budget": _budget(on_gpu, trials, space_size, time.monotonic() - started),
                 "trials": trials,
                 "winner": {"config": {}, "kernel": "", "median_ms": None, "commit": None,
                            "changed": False}})
