"""`kopt suite`: the offline engineer on a directory of KernelBench problems, one row each.

For every problem file: import it (`harness.kernelbench`, into a temporary workspace, never
the user's `./cases`), generate a candidate with the offline engineer, verify it with the real
verifier (on the GPU when there is one, else on the smoke inputs in the Triton interpreter),
and on a GPU time eager, torch.compile and the candidate with the harness timer (`bench_case`,
with the suite's quicker stopping rule). One problem that crashes, hangs or runs out of memory
costs its own row only: every user-code step runs in a subprocess with a timeout.

Speed: problems are prepared (import, codegen, verification) by `jobs` threads at once; a
timing worker's timed calls wait until no verification runs and hold the GPU alone (the GPU
gate, `harness.gpu_gate`: start-up and compiles overlap other work); the import probe and the
local workers reuse standby processes that have torch imported (`harness.kernelbench`,
`harness.targets.standby`); each row carries the seconds of each step.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from kopt.harness.errors import BadInputError, KoptError, NothingToGenerate
from kopt.harness.sizing import DEFAULT_MAX_ELEMENTS
from kopt.phases.outcome import KEEP_PYTORCH, decide

NOTHING_TO_GENERATE = "nothing to generate"
"""A row's status where the model has no op the engine generates: outcome keep-pytorch."""
QUICK_TIMING = {"rel_err_target": 0.03, "max_seconds": 1.0}
"""The suite's stopping rule: 3% relative error or one second per variant (`kopt bench` uses
the timer's 1% default)."""
FULL_TIMING: dict[str, Any] = {}
PROBLEM_TIMEOUT_S = 240.0
"""Per worker job of one problem (verification, timing); the probe has its own limit. A
candidate's verification job gets `harness.verify.fitted_timeout` of its reference job where
that is more (level-3 ShallowWideMLP's 8 GB of weights: its reference job took 112 s on an
H200, its candidate's ran past 245 s)."""


@dataclass(frozen=True)
class Problem:
    """One problem file and the level it belongs to (from its directory's name)."""

    file: Path
    level: str

    @property
    def name(self) -> str:
        return re.sub(r"[^A-Za-z0-9_-]", "_", f"{self.level}_{self.file.stem}")


@dataclass
class SuiteRow:
    """One problem's outcome. `status`: verified, rejected, import failed, codegen failed,
    nothing to generate (every compute op a library call kopt keeps: outcome keep-pytorch),
    failed (verification or timing could not run), timeout, unfinished (the suite was stopped
    while the problem ran: `unfinished_rows`)."""

    problem: str
    level: str
    file: str
    status: str = "failed"
    detail: str = ""
    """The failing checks, or why the problem stopped."""
    kernels: int | None = None
    pct_of_floor: float | None = None
    eager_ms: float | None = None
    compile_ms: float | None = None
    kopt_ms: float | None = None
    speedup_vs_eager: float | None = None
    speedup_vs_compile: float | None = None
    codegen_s: float | None = None
    smoke_within_budget: bool | None = None
    scaled: str = ""
    """GPU: how the main inputs were made smaller to fit the size budget (`harness.sizing`),
    e.g. "leading size 4096 -> 256 ..."; empty when they run as the file wrote them."""
    seconds: dict[str, float] = field(default_factory=dict)
    """Wall seconds per step: import, codegen, verify, regions, time."""
    regions: dict[str, str] = field(default_factory=dict)
    """GPU, candidates of two regions or more: the region choice that was timed
    ({"g0": "torch", "g1": "triton"}) when a region runs faster in PyTorch; empty otherwise."""
    verify_steps: dict[str, float] = field(default_factory=dict)
    """The verification's own steps (draws, reference, candidate, judge: VerificationReport.steps)."""
    jobs: dict[str, dict[str, Any]] = field(default_factory=dict)
    """The problem's worker jobs by kind (reference, candidate, tune, bench...): count, wall
    seconds as this process saw them, how the workers started, and the seconds of each step
    inside them (`phases.breakdown.TimingBreakdown.jobs`): where a problem's minute goes."""
    outcome: str = ""
    """GPU: the never-regress verdict of `phases.outcome` (faster, keep-compile,
    keep-pytorch): a candidate not faster than eager beyond the timer's noise is not the
    result, PyTorch is."""
    traceback: str = ""
    """For a failure of kopt's own code (status `failed` with an exception): the whole
    traceback; for a rejection, every failing check's whole text (a GPU compiler's message
    is longer than `detail` keeps): so that what was seen once on a borrowed machine can be
    found afterwards."""

    @property
    def verified(self) -> bool:
        return self.status == "verified"

    @property
    def total_s(self) -> float:
        return sum(self.seconds.values())

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "verified": self.verified, "total_s": round(self.total_s, 2)}


def level_of(directory: Path) -> str:
    """`level2` for a directory named level2 / level_2 / Level 2; else the directory's name."""
    m = re.search(r"level[\s_-]*(\d+)", directory.name, re.I)
    return f"level{m.group(1)}" if m else directory.name


def _natural(path: Path) -> tuple[Any, ...]:
    return tuple(int(t) if t.isdigit() else t.lower() for t in re.split(r"(\d+)", path.name))


def _problem_files(directory: Path) -> list[Path]:
    return [f for f in directory.glob("*.py") if not f.name.startswith("_")]


def _problem_dirs(top: Path) -> list[Path]:
    """`top` itself when it holds problem files; else its subdirectories that do, in natural
    order: KernelBench's own root (`level1/`, `level2/`, ...) runs level by level."""
    if _problem_files(top):
        return [top]
    return sorted((d for d in top.iterdir() if d.is_dir() and _problem_files(d)), key=_natural)


def discover(dirs: Sequence[str | Path], *, filter_text: str | None = None,
             limit: int | None = None, shard: tuple[int, int] | None = None) -> list[Problem]:
    """Problem files (`*.py`) of each directory in natural name order (2 before 10), or of
    each of its subdirectories that holds some (a KernelBench root: its level folders), those
    whose name contains `filter_text`, at most `limit` per directory; with `shard` (k, n), the
    k-th of n interleaved parts of that list (1-based: problems k, k+n, k+2n, ...), so that
    n machines or n calls cover a suite once between them."""
    problems: list[Problem] = []
    for d in dirs:
        top = Path(d).expanduser().resolve()
        if not top.is_dir():
            raise BadInputError(f"{d}: not a directory", fix="pass directories of problem .py files")
        for directory in _problem_dirs(top):
            files = sorted(_problem_files(directory), key=_natural)
            if filter_text:
                files = [f for f in files if filter_text.lower() in f.name.lower()]
            problems += [Problem(f, level_of(directory)) for f in files[:limit]]
    if shard is not None:
        k, n = shard
        problems = problems[k - 1::n]
    if not problems:
        raise BadInputError(f"no problem files in {', '.join(map(str, dirs))}"
                            + (f" matching {filter_text!r}" if filter_text else ""),
                            fix="pass directories holding KernelBench .py files")
    return problems


@contextmanager
def _workspace(root: Path, jobs: int, *, gated: bool) -> Iterator[None]:
    """Everything kopt writes (cases, caches, job folders) goes under `root` meanwhile,
    every worker started meanwhile gets its share of this process's CPUs as its thread count
    (`worker_threads`), unless OMP_NUM_THREADS is already set, and, when `gated` (a GPU
    suite), a GPU gate under `root` (`harness.gpu_gate`): verifications share the GPU, timed
    calls have it alone."""
    from kopt.harness import gpu_gate

    saved = {k: os.environ.get(k) for k in ("KOPT_HOME", "OMP_NUM_THREADS", gpu_gate.ENV)}
    os.environ["KOPT_HOME"] = str(root)
    os.environ.setdefault("OMP_NUM_THREADS", str(worker_threads(jobs)))
    if gated:
        os.environ[gpu_gate.ENV] = str(gpu_gate.GpuGate(root / ".kopt" / "gpu-gate").create().folder)
    else:
        os.environ.pop(gpu_gate.ENV, None)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def worker_threads(jobs: int) -> int:
    """CPU threads for each worker of a suite running `jobs` problems at once: the CPUs this
    process may run on, shared out (a problem's reference and candidate workers run one after
    the other). Torch's default, a thread per CPU in every process, oversubscribes a host that
    runs several problems at once. 2026-11-27, 4 shards x 4 jobs on a 64-core host of 4 H200s:
    verifications took 3-5x as long as on the H100 host of the session before, but a call with
    this share was no faster (the cause was the extra input sets' size, `verification.draws`):
    it is kept so that concurrent problems do not fight over cores."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cpus = os.cpu_count() or 1
    return max(1, cpus // max(1, jobs))


_CODEGEN_LOCK = threading.Lock()

_LIVE: dict[str, tuple[SuiteRow, str, float, float]] = {}
"""Problems running now: their row so far, the step they are in, when that step began and when
the problem began (`unfinished_rows`)."""
_LIVE_LOCK = threading.Lock()


def _begin(problem: Problem) -> None:
    """`problem` starts (`run_problem`): its steps are followed until `_end`."""
    now = time.perf_counter()
    with _LIVE_LOCK:
        _LIVE[problem.name] = (SuiteRow(problem.name, problem.level, str(problem.file)),
                               "start", now, now)


def _step(row: SuiteRow, step: str) -> None:
    """`row`'s problem enters `step` (import, codegen, verify, regions, time); a problem not
    started by `run_problem` (a step called on its own) is not followed."""
    now = time.perf_counter()
    with _LIVE_LOCK:
        if row.problem in _LIVE:
            _LIVE[row.problem] = (row, step, now, _LIVE[row.problem][3])


def _end(problem: Problem) -> None:
    with _LIVE_LOCK:
        _LIVE.pop(problem.name, None)


def unfinished_rows() -> list[SuiteRow]:
    """A row for each problem still running, for a suite that is being stopped (a device
    call's time limit, Ctrl-C): status `unfinished`, the step it was in and for how long, the
    seconds of the steps it had finished. A problem that never ends its row otherwise leaves
    no trace of where its time went."""
    now = time.perf_counter()
    with _LIVE_LOCK:
        live = list(_LIVE.values())
    return [replace(row, status="unfinished",
                    detail=f"stopped during {step}, {now - since:.0f} s into it "
                           f"({now - began:.0f} s into the problem)",
                    seconds={**row.seconds, step: now - since})
            for row, step, since, began in live]
"""torch.export is not meant to run in several threads at once."""


GATE_WAIT_FACTOR = 3
"""A timing job's limit is this many times the problem's: it may wait for the GPU gate
(`harness.gpu_gate`) while other problems' verifications finish."""


def _gated(timeout: float) -> float:
    from kopt.harness import gpu_gate

    return timeout * GATE_WAIT_FACTOR if gpu_gate.from_env() else timeout


def prepare_problem(problem: Problem, root: Path, *, device: str,
                    timeout: float = PROBLEM_TIMEOUT_S,
                    max_elements: int = DEFAULT_MAX_ELEMENTS,
                    target: Any = None) -> tuple[SuiteRow, Any, Path | None]:
    """Import, generate and verify one problem: its row, the case and the candidate file
    (None when it did not get that far). On a GPU, main inputs whose largest tensor (input or
    output) holds more than `max_elements` run on fewer rows (`harness.sizing`; 0: never).
    `target`: where its worker jobs run (None: this machine; `run_problem` passes a clocked
    one)."""
    from kopt.harness import gpu_gate
    from kopt.harness.case import load_case_dir
    from kopt.harness.kernelbench import import_kernelbench
    from kopt.harness.sizing import fit_case_dir
    from kopt.harness.verify import verify_candidate
    from kopt.phases.engineers.offline import generate_candidate
    from kopt.phases.engineers.offline.engineer import FIXED_LEAD_NOTE

    row = SuiteRow(problem.name, problem.level, str(problem.file))
    _step(row, "import")
    t0 = time.perf_counter()
    smoke: dict[str, Any] = {}
    out = root / "cases" / problem.name
    if out.exists():  # an earlier suite in the same --keep folder: this run's case replaces it
        shutil.rmtree(out)
    try:
        directory = import_kernelbench(problem.file, name=problem.name, out=out, report=smoke,
                                       warm=True)
        case = load_case_dir(directory)
        if device == "cuda" and max_elements > 0:
            fit = fit_case_dir(case, max_elements)
            if fit is not None:
                row.scaled = fit.note
                case = load_case_dir(directory)
    except KoptError as err:
        row.status, row.detail = "import failed", err.one_line()[:300]
        return row, None, None
    finally:
        row.seconds["import"] = time.perf_counter() - t0
    row.smoke_within_budget = bool(smoke.get("within_budget"))
    if device == "cpu" and case.manifest.smoke is None:
        row.status, row.detail = "import failed", str(smoke.get("warning") or "no smoke set")
        return row, case, None

    _step(row, "codegen")
    t0 = time.perf_counter()
    try:
        with _CODEGEN_LOCK:
            result = generate_candidate(case)
    except NothingToGenerate as err:  # PyTorch is this model's answer: not a failure
        row.status, row.outcome, row.detail = NOTHING_TO_GENERATE, KEEP_PYTORCH, err.one_line()[:300]
        return row, case, None
    except Exception as err:  # the engineer's own failure on this problem: its row only
        row.status, row.detail = "codegen failed", f"{type(err).__name__}: {err}"[:300]
        return row, case, None
    finally:
        row.seconds["codegen"] = time.perf_counter() - t0
    row.codegen_s = result.seconds
    row.kernels = len(result.kernels)
    candidate = root / "kernels" / f"{problem.name}.py"
    candidate.parent.mkdir(parents=True, exist_ok=True)
    candidate.write_text(result.source)

    _step(row, "verify")
    t0 = time.perf_counter()
    try:
        with gpu_gate.shared_window():
            report = verify_candidate(case, candidate, device=device, min_timeout=timeout,
                                      target=target)
        if device == "cuda" and not report.accepted and _out_of_memory(report):
            # four problems share the GPU while they verify; one that ran out of memory
            # beside the others is verified again with the GPU to itself
            with gpu_gate.exclusive_window():
                report = verify_candidate(case, candidate, device=device, min_timeout=timeout,
                                          target=target)
            row.detail = "re-verified alone after running out of GPU memory beside other problems"
    except KoptError as err:
        row.status, row.detail = "failed", f"verification could not run: {err.one_line()}"[:300]
        return row, case, None
    finally:
        row.seconds["verify"] = time.perf_counter() - t0
    row.verify_steps = {k: round(v, 2) for k, v in report.steps.items()}
    if not report.accepted:
        row.status = "rejected"
        bad = [c for c in report.checks if not c.passed]
        failed = "; ".join(f"{c.name}: {c.detail}" for c in bad)
        # a candidate fixed at the traced leading size: the likely cause, said first
        why = next((n for n in result.notes if n.startswith(FIXED_LEAD_NOTE)), "")
        row.detail = (why.split(" (")[0] + "; " if why else "") + failed
        row.detail, row.traceback = row.detail[:300], row.detail[:8000]
        return row, case, None
    row.status = "verified"
    return row, case, candidate


FALLBACK_CHOICES = 2
"""Winning changes tried alone (each verified in full) when all of them together fail."""


def choose_regions(row: SuiteRow, case: Any, candidate: Path, *, device: str,
                   timeout: float = PROBLEM_TIMEOUT_S, target: Any = None) -> Path:
    """GPU: each region of a candidate timed in Triton and in PyTorch, and kept in PyTorch
    where that gains over the timer's noise; a changed choice is verified in full before it
    is timed. The file to time: the candidate itself when every region is faster in Triton
    (or the changed choice fails verification).

    One `harness.tune` job (output-checked trials) times, side by side: the candidate; each
    family of regions (the same kind of kernel: every matmul, every row reduction) switched
    to PyTorch together; every matmul on cuBLAS's product with its epilogue kept in Triton
    (`BACKEND_KEY`); the forward op by op instead of replayed as a CUDA graph (`GRAPH_KEY`);
    each region alone switched to PyTorch. The families and the backend come
    first (many small gains, each under the noise alone, add up over it; a trial budget
    that runs out cuts the single regions). The regions are separate kernels, so their gains
    add, and a choice of two changes or more is timed once more against the candidate (the
    joint check of `phases.search`) before it counts. 2026-11-26, H100: a search of one job
    per region cost 22-34 s of exclusive GPU time per problem of two or more regions."""
    from kopt.harness.device import default_input_set
    from kopt.harness.tune import time_trials
    from kopt.phases.engineers.offline.regions import (
        BACKEND_KEY,
        GRAPH_KEY,
        apply_choices,
        cublas_kernels,
        region_families,
        region_space,
        replays_graph,
    )
    from kopt.phases.search import CoordinateSearch, time_files

    source = candidate.read_text()
    space = region_space(source)
    backend = bool(cublas_kernels(source))
    graph = replays_graph(source)
    if not space and not backend and not graph:
        return candidate
    _step(row, "regions")
    t0 = time.perf_counter()
    input_set = default_input_set(case, device)
    files: dict[str, Path] = {}

    def file_of(config: dict[str, Any]) -> Path:
        key = json.dumps(config, sort_keys=True)
        if key not in files:
            text = apply_choices(source, config)  # raises for every region in PyTorch
            files[key] = candidate.with_name(f"{candidate.stem}-regions{len(files)}.py")
            files[key].write_text(text)
        return files[key]

    def time_configs(configs: list[dict[str, Any]], _what: str) -> list[dict[str, Any]]:
        return time_files(configs, file_of, lambda paths: time_trials(
            case, paths, device=device, input_set=input_set, timing_options=QUICK_TIMING,
            timeout=_gated(timeout), budget_s=30.0, target=target))[0]

    try:
        default: dict[str, Any] = {k: v[0] for k, v in space.items()}
        changes: dict[str, dict[str, Any]] = {
            f"{family} regions": {k: space[k][1] for k in keys}
            for family, keys in region_families(source).items()}
        if backend:
            changes["matmul on cuBLAS"] = {BACKEND_KEY: "cublas"}
        if graph:
            changes["forward op by op"] = {GRAPH_KEY: False}
        changes.update({k: {k: v[1]} for k, v in space.items()})
        search = CoordinateSearch(space, time_configs, max_trials=len(changes) + 4)
        base, *alone = search.retime([default, *({**default, **c} for c in changes.values())],
                                     "each change alone: families, backend, regions")
        trials = dict(zip(changes, alone, strict=True))
        winners = [name for name, r in trials.items() if search.gains(r, base)]
        if not winners:
            row.detail = row.detail or _no_gain_note(base, trials)
            return candidate
        keep = dict(default)
        for name in winners:
            keep.update(changes[name])
        if len(winners) > 1:
            keep, _ = search.joint_check(default, keep)
            if keep == default:
                return candidate
        chosen = _verified_choice(row, case, candidate, file_of(keep), keep, device=device,
                                  timeout=timeout, target=target)
        if chosen != candidate or len(winners) < 2:
            return chosen
        # the winners together failed verification (KernelBench level-3 28: every compute
        # region in PyTorch, which no_pytorch_fallback refuses): each winner alone, fastest first
        failed = row.detail
        ranked = sorted(winners, key=lambda n: float(trials[n]["median_ms"]))
        for name in ranked[:FALLBACK_CHOICES]:
            single = {**default, **changes[name]}
            if single == keep:
                continue
            chosen = _verified_choice(row, case, candidate, file_of(single), single,
                                      device=device, timeout=timeout, target=target)
            if chosen != candidate:
                row.detail = f"{name} alone kept; {failed}"[:300]
                return chosen
        return candidate
    finally:
        row.seconds["regions"] = time.perf_counter() - t0


def _no_gain_note(base: dict[str, Any], trials: dict[str, dict[str, Any]]) -> str:
    """What the region search saw when no change gained: the candidate's time, the fastest
    checked change, and the changes it could not judge (their first reason)."""
    def ms(r: dict[str, Any]) -> str:
        return f"{float(r['median_ms']):.3f} ms" if r.get("median_ms") else "no time"

    note = f"region search: no change beat the candidate ({ms(base)}"
    if not base.get("checked"):
        note += f", unchecked: {base.get('detail') or 'no output check'}"
    note += ")"
    checked = {k: r for k, r in trials.items() if r.get("checked") and r.get("median_ms")}
    if checked:
        best = min(checked, key=lambda k: float(checked[k]["median_ms"]))
        note += f"; fastest change: {best} {ms(checked[best])}"
    unjudged = [k for k, r in trials.items() if not r.get("checked")]
    if unjudged:
        note += (f"; {len(unjudged)} of {len(trials)} not judged ({unjudged[0]}: "
                 f"{trials[unjudged[0]].get('detail') or 'no output check'})")
    return note[:300]


def _verified_choice(row: SuiteRow, case: Any, candidate: Path, chosen: Path,
                     keep: dict[str, Any], *, device: str, timeout: float,
                     target: Any = None) -> Path:
    """`chosen` once verified in full (the row records the choice), else the candidate."""
    from kopt.harness import gpu_gate
    from kopt.harness.verify import verify_candidate
    from kopt.phases.engineers.offline.regions import is_region_key, region_of

    with gpu_gate.shared_window():
        report = verify_candidate(case, chosen, device=device, min_timeout=timeout,
                                  target=target)
    if not report.accepted:
        row.detail = ("the region choice failed verification (" + ", ".join(report.failed())
                      + "): every region timed in Triton; the choice was "
                      + json.dumps(keep))[:300]  # (the reason first: the choice is long)
        return candidate
    row.regions = {(region_of(k) if is_region_key(k) else k.rpartition("/")[2]): str(v)
                   for k, v in keep.items()}
    return chosen


def _out_of_memory(report: Any) -> bool:
    return any("OutOfMemoryError" in c.detail or "CUDA out of memory" in c.detail
               for c in report.checks if not c.passed)


def time_problem(row: SuiteRow, case: Any, candidate: Path, *, device: str, rounds: int,
                 timing: dict[str, Any], timeout: float = PROBLEM_TIMEOUT_S,
                 target: Any = None) -> None:
    """Eager, torch.compile and the candidate with the harness timer (GPU only), `rounds`
    times, the median of each: fills the row's times, speedups and % of floor."""
    from kopt.harness.bench import bench_case

    _step(row, "time")
    t0 = time.perf_counter()
    timings: dict[str, list[dict[str, float]]] = {"eager": [], "compile": [], "kopt": []}
    """Each round's {median, p20, p80} per variant (`phases.outcome`'s shape)."""
    pct: list[float] = []
    try:
        for _ in range(max(1, rounds)):
            rows = bench_case(case, [candidate], device=device, unverified=True,
                              timeout=_gated(timeout), timing_options=timing, target=target)
            for r in rows:
                key = r["variant"] if r["variant"] in ("eager", "compile") else "kopt"
                if r["median_ms"]:
                    timings[key].append({"median": r["median_ms"], "p20": r["p20_ms"],
                                         "p80": r["p80_ms"]})
                elif key == "kopt":
                    row.status, row.detail = "failed", f"timing: {r.get('note') or 'no time'}"[:300]
                if key == "kopt" and r["pct_of_floor"]:
                    pct.append(r["pct_of_floor"])
                graphs = r.get("graphs") or {}
                if key == "kopt" and graphs.get("op_by_op") and not row.detail:
                    row.detail = ("timed op by op (no CUDA graph): "
                                  + "; ".join(graphs["op_by_op"]))[:300]
    except KoptError as err:
        row.status, row.detail = "failed", f"timing: {err.one_line()}"[:300]
    finally:
        row.seconds["time"] = time.perf_counter() - t0

    # the round with the median time of each variant
    mid = {k: sorted(v, key=lambda t: t["median"])[len(v) // 2] if v else None
           for k, v in timings.items()}
    row.eager_ms, row.compile_ms, row.kopt_ms = (
        mid[k]["median"] if mid[k] else None for k in ("eager", "compile", "kopt"))
    row.pct_of_floor = sorted(pct)[len(pct) // 2] if pct else None
    if row.kopt_ms:
        row.speedup_vs_eager = row.eager_ms / row.kopt_ms if row.eager_ms else None
        row.speedup_vs_compile = row.compile_ms / row.kopt_ms if row.compile_ms else None
        row.outcome = decide(verified=row.verified, timing_label="cuda-events",
                             eager=mid["eager"], compiled=mid["compile"],
                             candidate=mid["kopt"]).verdict


def run_problem(problem: Problem, root: Path, *, device: str, rounds: int = 1,
                timing: dict[str, Any] | None = None, timeout: float = PROBLEM_TIMEOUT_S,
                max_elements: int = DEFAULT_MAX_ELEMENTS) -> SuiteRow:
    """One problem end to end; never raises (a failure is the row's status)."""
    from kopt.harness.targets.resolve import resolve_target
    from kopt.phases.breakdown import ClockedTarget, TimingBreakdown

    _begin(problem)
    clock = TimingBreakdown()
    target = ClockedTarget(resolve_target(None), clock)
    try:
        row, case, candidate = prepare_problem(problem, root, device=device, timeout=timeout,
                                               max_elements=max_elements, target=target)
        if candidate is not None and device == "cuda":
            # the timing workers take the GPU gate around their timed calls only
            try:
                candidate = choose_regions(row, case, candidate, device=device,
                                           timeout=timeout, target=target)
            except Exception as err:  # the choice is an optimisation: time what verified
                row.detail = (f"region choice failed ({type(err).__name__}: {err}); "
                              "every region timed in Triton")[:300]
            time_problem(row, case, candidate, device=device, rounds=rounds,
                         timing=QUICK_TIMING if timing is None else timing, timeout=timeout,
                         target=target)
        row.jobs = clock.to_dict()["jobs"]
        return row
    except Exception as err:  # a bug must cost one row, not the suite
        import traceback

        # the deepest frame of kopt's own code, then the frame that raised (when another)
        frames = traceback.extract_tb(err.__traceback__)
        ours = [f for f in frames if _is_kopt_file(f.filename)]
        spots = [f"{Path(f.filename).name}:{f.lineno}" for f in ours[-1:] + frames[-1:]]
        where = " at " + " in ".join(dict.fromkeys(spots)) if spots else ""
        return SuiteRow(problem.name, problem.level, str(problem.file), "failed",
                        f"{type(err).__name__}: {err}{where}"[:300],
                        traceback="".join(traceback.format_exception(err))[-8000:])
    finally:
        _end(problem)


_SOURCE_ROOT = Path(__file__).resolve().parent.parent


def _is_kopt_file(filename: str) -> bool:
    return Path(filename).resolve().is_relative_to(_SOURCE_ROOT)


@dataclass
class SuiteResult:
    rows: list[SuiteRow]
    device: str
    seconds: float
    workdir: str
    environment: dict[str, Any] = field(default_factory=dict)
    """What the figures were measured with (`environment`): a table of speedups means
    nothing without the GPU, the torch and Triton versions and the code that made them."""

    def summary(self) -> dict[str, Any]:
        return summarize(self.rows) | {"device": self.device, "seconds": round(self.seconds, 1),
                                       "workdir": self.workdir, "environment": self.environment}


def environment() -> dict[str, Any]:
    """This machine as every metrics file records it (`harness.environment`: Python, torch,
    Triton, the GPU), and kopt's commit where its source is a git checkout (`+changes` when
    tracked files differ from it)."""
    import subprocess

    from kopt.harness.environment import describe_environment

    env = describe_environment()

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(_SOURCE_ROOT), *args], capture_output=True,
                              text=True, timeout=10, check=True).stdout.strip()

    try:
        commit = git("rev-parse", "--short", "HEAD")
        if commit:
            dirty = git("status", "--porcelain", "--untracked-files=no")
            env["kopt_commit"] = commit + ("+changes" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        pass  # not a checkout, or no git: the installed version (`kopt`) stands
    return env


def environment_line(env: dict[str, Any]) -> str:
    """`NVIDIA H200, torch 2.11.0+cu130, Triton 3.6.0, kopt 1a2b3c4` (what is known)."""
    gpu = env.get("gpu")
    parts = [gpu["name"]] if isinstance(gpu, dict) and gpu.get("name") else []
    parts += [f"{name} {env[key]}" for key, name in
              (("torch", "torch"), ("triton", "Triton"), ("kopt_commit", "kopt")) if env.get(key)]
    return ", ".join(parts)


def geomean(values: Sequence[float]) -> float | None:
    vals = [v for v in values if v and v > 0]
    return math.exp(sum(map(math.log, vals)) / len(vals)) if vals else None


def _stats(rows: Sequence[SuiteRow]) -> dict[str, Any]:
    timed = [r for r in rows if r.speedup_vs_eager]
    return {"problems": len(rows), "verified": sum(r.verified for r in rows),
            "timed": len(timed),
            "geomean_vs_eager": geomean([r.speedup_vs_eager or 0 for r in timed]),
            "geomean_vs_compile": geomean([r.speedup_vs_compile or 0 for r in timed]),
            "slower_than_eager": sum(1 for r in timed if (r.speedup_vs_eager or 0) < 1.0),
            "keep_pytorch": sum(1 for r in timed if r.outcome == KEEP_PYTORCH),
            "nothing_to_generate": sum(1 for r in rows if r.status == NOTHING_TO_GENERATE),
            # what a user of each result runs: PyTorch (1.00x) where the candidate is not
            # faster than eager beyond noise (the never-regress outcome), else the candidate
            "geomean_result_vs_eager": geomean([1.0 if r.outcome == KEEP_PYTORCH
                                                else r.speedup_vs_eager or 0 for r in timed])}


def summarize(rows: Sequence[SuiteRow]) -> dict[str, Any]:
    """Verified count, geomeans vs eager and compile, count slower than eager: overall and
    per level; and where the problems' seconds went (`time_spent`)."""
    levels = sorted({r.level for r in rows}, key=lambda s: _natural(Path(s)))
    return {**_stats(rows), "levels": {lv: _stats([r for r in rows if r.level == lv])
                                       for lv in levels},
            "time_spent": time_spent(rows)}


TOP_JOB_STEPS = 12


def time_spent(rows: Sequence[SuiteRow]) -> dict[str, Any]:
    """The problems' seconds summed: per step of a problem (`steps`: import, codegen,
    verify, regions, time), per worker job kind (`jobs`: count and wall seconds) and the
    `TOP_JOB_STEPS` largest steps inside the jobs (`job_steps`, "bench: first call,
    compile"). Problems run side by side, so the sums exceed the suite's wall time; they say
    what a faster suite must cut."""
    steps: dict[str, float] = {}
    jobs: dict[str, dict[str, float]] = {}
    inner: dict[str, float] = {}
    for r in rows:
        for name, sec in r.seconds.items():
            steps[name] = steps.get(name, 0.0) + sec
        for kind, d in r.jobs.items():
            j = jobs.setdefault(kind, {"count": 0, "seconds": 0.0})
            j["count"] += d.get("count", 0)
            j["seconds"] += d.get("seconds", 0.0)
            for name, sec in (d.get("steps") or {}).items():
                inner[f"{kind}: {name}"] = inner.get(f"{kind}: {name}", 0.0) + sec
    top = sorted(inner.items(), key=lambda kv: -kv[1])[:TOP_JOB_STEPS]
    return {"steps": {k: round(v, 1) for k, v in steps.items()},
            "jobs": {k: {"count": int(v["count"]), "seconds": round(v["seconds"], 1)}
                     for k, v in sorted(jobs.items(), key=lambda kv: -kv[1]["seconds"])},
            "job_steps": {k: round(v, 1) for k, v in top}}


def run_suite(problems: Sequence[Problem], *, device: str | None = None, jobs: int | None = None,
              rounds: int = 1, timing: dict[str, Any] | None = None,
              timeout: float = PROBLEM_TIMEOUT_S, workdir: Path | None = None,
              max_elements: int = DEFAULT_MAX_ELEMENTS,
              on_start: Callable[[Problem], None] | None = None,
              on_row: Callable[[SuiteRow], None] | None = None) -> SuiteResult:
    """Every problem, `jobs` at a time (GPU timing one at a time); rows in problem order.
    Writes only under `workdir` (a temporary folder, removed afterwards, when None)."""
    from kopt.harness.device import gpu_available

    device = device or ("cuda" if gpu_available() else "cpu")
    if jobs is None:
        jobs = max(1, min(4, (os.cpu_count() or 2) // 4)) if device == "cuda" else 1
    keep = workdir is not None
    root = Path(workdir).resolve() if workdir else Path(tempfile.mkdtemp(prefix="kopt-suite-"))
    root.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()

    def one(problem: Problem) -> SuiteRow:
        if on_start:
            on_start(problem)
        row = run_problem(problem, root, device=device, rounds=rounds, timing=timing,
                          timeout=timeout, max_elements=max_elements)
        if on_row:
            on_row(row)
        return row

    from kopt.phases.engineers.offline.capture import warm_up

    warm_up()  # torch.export's one-time set-up, not the first problem's codegen
    try:
        with _workspace(root, jobs, gated=device == "cuda"):
            # Problems run on threads, one at a time too: the main thread only waits, so a
            # signal (Ctrl-C, SIGTERM) is handled at once. Python runs handlers on the main
            # thread between bytecodes: a problem run there inside one long C call (drawing
            # the 8.6 GB of weights of a level-3 MLP) kept a device call's SIGTERM waiting
            # until `timeout` killed the suite 5 s later, with no row written (2026-11-27).
            pool = ThreadPoolExecutor(max_workers=max(1, jobs))
            try:
                futures = [pool.submit(one, p) for p in problems]
                pending = set(futures)
                while pending:  # short waits: a signal, which may wake another thread, runs here
                    _, pending = wait(pending, timeout=0.5)
                rows = [f.result() for f in futures]
            finally:  # stopped: the caller writes what is running now, without waiting on it
                pool.shutdown(wait=False, cancel_futures=True)
    finally:
        from kopt.harness.kernelbench import close_probe_standby

        close_probe_standby()
        if not keep:
            shutil.rmtree(root, ignore_errors=True)
    return SuiteResult(rows, device, time.perf_counter() - start, str(root) if keep else "",
                       environment())


# -- reports --------------------------------------------------------------------------------------

def _x(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}x"


def to_markdown(result: SuiteResult) -> str:
    """The rows as a markdown table, then the summary (overall and per level)."""
    lines = ["| problem | level | verified | kernels | % of floor | vs eager | vs compile "
             "| outcome | codegen s | total s | detail |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in result.rows:
        detail = r.detail.replace("|", "/").replace("\n", " ")[:120]
        lines.append(
            f"| {r.problem}{' (scaled)' if r.scaled else ''} | {r.level} "
            f"| {'yes' if r.verified else r.status} "
            f"| {'-' if r.kernels is None else r.kernels} "
            f"| {'-' if r.pct_of_floor is None else f'{r.pct_of_floor:.0f}%'} "
            f"| {_x(r.speedup_vs_eager)} | {_x(r.speedup_vs_compile)} | {r.outcome or '-'} "
            f"| {'-' if r.codegen_s is None else f'{r.codegen_s:.2f}'} | {r.total_s:.1f} | {detail} |")
    s = result.summary()
    measured = environment_line(result.environment)
    lines += ["", f"Device: {result.device}{f' ({measured})' if measured else ''}; "
              f"{s['seconds']} s in all.", "",
              "| level | problems | verified | timed | geomean vs eager | geomean vs compile "
              "| slower than eager | keep PyTorch | result vs eager |",
              "|---|---|---|---|---|---|---|---|---|"]
    for name, st in [*s["levels"].items(), ("all", s)]:
        lines.append(f"| {name} | {st['problems']} | {st['verified']} | {st['timed']} "
                     f"| {_x(st['geomean_vs_eager'])} | {_x(st['geomean_vs_compile'])} "
                     f"| {st['slower_than_eager']} | {st['keep_pytorch']} "
                     f"| {_x(st['geomean_result_vs_eager'])} |")
    lines += ["", "Geomeans are the candidates'. `result vs eager` counts a problem whose "
              "candidate does not beat eager beyond the timer's noise (outcome keep-pytorch) "
              "at 1.00x: the user keeps PyTorch there."]
    if s["nothing_to_generate"]:
        lines += ["", f"{s['nothing_to_generate']} problem(s) had nothing to generate (every "
                  "compute op a library call kopt keeps whole): PyTorch is their answer."]
    if result.device != "cuda":
        lines += ["", "CPU (Triton interpreter, smoke inputs): verification only, no timings."]
    spent = s["time_spent"]
    if spent["steps"]:
        lines += ["", "Where the problems' seconds went (summed over problems run side by side):",
                  "", "| step | seconds |", "|---|---|"]
        lines += [f"| {k} | {v:.1f} |" for k, v in spent["steps"].items()]
        lines += [f"| {kind} jobs ({d['count']}) | {d['seconds']:.1f} |"
                  for kind, d in spent["jobs"].items()]
        lines += [f"| {k} | {v:.1f} |" for k, v in spent["job_steps"].items()]
    return "\n".join(lines) + "\n"


def write_chart(result: SuiteResult, path: Path) -> Path | None:
    """A PNG of speedup vs eager (and vs compile) per problem, sorted; None when no problem
    was timed (CPU)."""
    timed = sorted((r for r in result.rows if r.speedup_vs_eager), key=lambda r: r.speedup_vs_eager or 0)
    if not timed:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(max(6.0, 0.12 * len(timed) + 2), 4.5))
    xs = range(len(timed))
    ax.bar(xs, [r.speedup_vs_eager or 0 for r in timed], label="vs eager", color="#4c72b0")
    ax.plot(xs, [r.speedup_vs_compile or float("nan") for r in timed], "o", ms=3,
            label="vs torch.compile", color="#dd8452")
    ax.axhline(1.0, color="black", lw=0.8)
    ax.set_yscale("log")
    ax.set_ylabel("speedup (x)")
    ax.set_xlabel(f"{len(timed)} problems, sorted by speedup vs eager")
    ax.set_xticks([])
    s = result.summary()
    ax.set_title(f"kopt suite on {result.device}: geomean {_x(s['geomean_vs_eager'])} vs eager, "
                 f"{_x(s['geomean_vs_compile'])} vs compile")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _base(out: Path) -> Path:
    return out.with_suffix("") if out.suffix in (".md", ".json", ".png") else out


def rows_file(out: Path) -> Path:
    """`FILE.rows.jsonl` beside `--out FILE`: one JSON row per problem, appended as each
    problem ends (a suite killed at a time limit keeps every finished row there)."""
    base = _base(out)
    return base.with_name(base.name + ".rows.jsonl")


def row_from_dict(data: dict[str, Any]) -> SuiteRow:
    """A row read back from JSON (`to_dict`'s derived keys dropped)."""
    names = {f.name for f in fields(SuiteRow)}
    return SuiteRow(**{k: v for k, v in data.items() if k in names})


def write_reports(result: SuiteResult, out: Path) -> list[Path]:
    """`out` with .md, .json and .png suffixes (the chart only when problems were timed)."""
    import json

    base = _base(out)
    base.parent.mkdir(parents=True, exist_ok=True)
    md, js, png = (base.with_name(base.name + ext) for ext in (".md", ".json", ".png"))
    md.write_text(to_markdown(result))
    js.write_text(json.dumps({"summary": result.summary(),
                              "rows": [r.to_dict() for r in result.rows]}, indent=1, default=str))
    written = [md, js]
    chart = write_chart(result, png)
    if chart:
        written.append(chart)
    return written
