"""`bench_case`: eager, torch.compile and each accepted candidate, timed by the harness timer.

Candidates are verified first (`--unverified` skips that and marks the rows). Each candidate
is timed in its own worker; eager and compile share one worker that never sees candidate
code. Fresh input values are written in place between timed calls; after timing, one output
sample on known values is compared here with the baseline's. A row is refused when that
sample is wrong, a clock or torch object was replaced, work was left on a side stream or
after the timed call, or the time beats the time it takes to move the bytes the case must
read and write (impossible).
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file

from kopt.harness.case import Case, TensorSpec, load_case
from kopt.harness.compare import compare_outputs
from kopt.harness.data import agent_provide_weights, draw_tensor
from kopt.harness.device import default_input_set, resolve_device, timing_label, worker_env
from kopt.harness.errors import BadInputError
from kopt.harness.job import as_target, candidate_files, cleanup, stage_job
from kopt.harness.speedup import Speedup
from kopt.harness.targets.base import LineSink, Target
from kopt.harness.tolerance import tolerance_for
from kopt.harness.verification.tensors import input_keys, load_outputs, save_tensors
from kopt.harness.verify import DEFAULT_TIMEOUT_S, verify_candidates

POOL = 4
"""Input value sets rotated through the timed calls (each written in place)."""
FLOOR_SLACK = 1.10
"""A time under the memory floor / 1.10 is refused as impossible. The copy ceiling is itself
a measured figure (~90% of the datasheet peak), which a kernel can tie but not beat by 10%.
Only the memory part of the roofline floor bounds every correct candidate: its FLOP part is
the model's own algorithm, and a rewrite that holds for every input may do fewer (a sum over
a product's columns as a matrix-vector product with summed weights: KernelBench level-2 14 at
0.476 ms against a 2.684 ms FLOP floor on an H200, 2026-11-27). % of floor stays measured
against the model's floor, so such a candidate shows over 100%."""
BASELINES = ("eager", "compile")
BASELINE_KEEP_S = 600.0
"""How long a `BaselineMemo` keeps eager's and torch.compile's timings of a case: ten minutes of
saved edits in the workbench time only the edit; after that, or on an explicit re-bench, the
baselines are timed again beside it."""

ROW_KEYS = ("variant", "median_ms", "p20_ms", "p80_ms", "gbps", "tflops", "pct_of_floor",
            "speedup_vs_eager", "speedup_vs_compile", "verified", "timing_label")


def _row(variant: str, label: str, verified: bool, note: str = "") -> dict[str, Any]:
    row: dict[str, Any] = {k: None for k in ROW_KEYS}
    row.update(variant=variant, verified=verified, timing_label=label, note=note)
    return row


@dataclass(frozen=True)
class _Baseline:
    """One baseline job's results: its rows, the output sample on the `check` values (and
    those values and the weights), its roofline and when it ran."""

    rows: tuple[dict[str, Any], ...]
    check: dict[str, Any]
    weights: Any
    reference: Any
    roof: dict[str, Any]
    at: float


class BaselineMemo:
    """Eager's and torch.compile's timings of a case kept between benches (the workbench's
    saved-edit loop, and with `directory` the workspace's runs), so that a later bench of a
    candidate times only the candidate. The candidate's output sample is checked against the
    kept baseline's on the kept `check` values; the timed calls' values are drawn anew for
    every bench. Kept rows carry `timed_s_ago`. A changed case file, device, input set, timing
    window or list of baselines, or an age over `keep_s`, times the baselines again.

    `directory`: also kept on disk there, one folder per key (its rows and roofline in
    `baseline.json`, written last, and the `check` values and eager's outputs on them as
    safetensors), so that the next command in the workspace finds them; the disk key adds
    the host, the visible GPUs and the torch and kopt versions."""

    def __init__(self, keep_s: float = BASELINE_KEEP_S, directory: Path | None = None) -> None:
        self.keep_s = keep_s
        self.directory = directory
        self._kept: dict[tuple[str, ...], _Baseline] = {}
        self._lock = threading.Lock()

    def get(self, key: tuple[str, ...]) -> _Baseline | None:
        with self._lock:
            kept = self._kept.get(key) or self._load(key)
            if kept is not None and time.monotonic() - kept.at > self.keep_s:
                self._kept.pop(key, None)
                return None
            if kept is not None:
                self._kept[key] = kept
            return kept

    def put(self, key: tuple[str, ...], baseline: _Baseline) -> None:
        with self._lock:
            self._kept[key] = baseline
            if self.directory is not None:
                try:
                    self._save(key, baseline)
                except OSError:  # a read-only or full disk: kept in this process only
                    pass

    def clear(self) -> None:
        with self._lock:
            self._kept.clear()
            if self.directory is not None and self.directory.is_dir():
                shutil.rmtree(self.directory, ignore_errors=True)

    def _folder(self, key: tuple[str, ...]) -> Path:
        import socket

        import kopt

        where = (socket.gethostname(), os.environ.get("CUDA_VISIBLE_DEVICES", ""),
                 torch.__version__, kopt.__version__)
        digest = hashlib.sha256(json.dumps([*key, *where]).encode()).hexdigest()[:24]
        assert self.directory is not None
        return self.directory / digest

    def _save(self, key: tuple[str, ...], b: _Baseline) -> None:
        folder = self._folder(key)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "baseline.json").unlink(missing_ok=True)  # incomplete until written again
        for name, tensors in (("check", b.check), ("reference", b.reference)):
            if tensors is None:
                (folder / f"{name}.safetensors").unlink(missing_ok=True)
                continue
            tmp = folder / f".{name}.{os.getpid()}.tmp"
            save_tensors(tensors, tmp)
            os.replace(tmp, folder / f"{name}.safetensors")
        tmp = folder / f".baseline.{os.getpid()}.tmp"
        tmp.write_text(json.dumps({"key": list(key), "rows": list(b.rows), "roof": b.roof,
                                   "timed_at": time.time() - (time.monotonic() - b.at)},
                                  default=str))
        os.replace(tmp, folder / "baseline.json")

    def _load(self, key: tuple[str, ...]) -> _Baseline | None:
        """The kept baseline of `key` on disk, or None (none, too old, unreadable)."""
        if self.directory is None:
            return None
        folder = self._folder(key)
        try:
            data = json.loads((folder / "baseline.json").read_text())
            age = time.time() - float(data["timed_at"])
            if data.get("key") != list(key) or not 0 <= age <= self.keep_s:
                return None
            check = load_file(str(folder / "check.safetensors"))
            ref = folder / "reference.safetensors"
            reference = load_outputs(ref) if ref.is_file() else None
        except Exception:  # noqa: BLE001 - a torn or foreign file is only a miss
            return None
        return _Baseline(rows=tuple(data["rows"]), check=check, weights=None,
                         reference=reference, roof=data.get("roof") or {},
                         at=time.monotonic() - age)


def workspace_baselines() -> BaselineMemo:
    """The workspace's kept baselines (`.kopt/baselines/`): `kopt run`'s integrator times only
    the final kernel when eager and torch.compile of the unchanged case were timed there in
    the last ten minutes (a second run), and says how long ago."""
    from kopt.harness.paths import baselines_dir

    return BaselineMemo(directory=baselines_dir())


def case_files_digest(case: Case) -> str:
    """The case's model.py and manifest.yaml, hashed: what a measurement kept for the case
    (kept baselines, the architect's kept region profile) must still match."""
    files = hashlib.sha256()
    for f in (case.model_file, case.manifest_file):
        files.update(f.read_bytes())
    return files.hexdigest()


def _memo_key(case: Case, dev: str, set_name: str, timing_options: dict[str, Any] | None,
              baselines: Sequence[str]) -> tuple[str, ...]:
    return (str(case.directory.resolve()), case_files_digest(case), dev, set_name,
            json.dumps(timing_options or {}, sort_keys=True, default=str), ",".join(baselines))


def bench_case(case: Case | str, candidates: Sequence[Path | str], *, device: str | None = None,
               unverified: bool = False, target: Target | str | None = None,
               timeout: float = DEFAULT_TIMEOUT_S, baselines: Sequence[str] = BASELINES,
               input_set: str | None = None, on_line: LineSink | None = None,
               timing_options: dict[str, Any] | None = None,
               verified: Sequence[Path | str] = (),
               memo: BaselineMemo | None = None) -> list[dict[str, Any]]:
    """Rows `{variant, median_ms, p20_ms, p80_ms, gbps, tflops, pct_of_floor,
    speedup_vs_eager, speedup_vs_compile, verified, timing_label, note}`: eager and compile
    first, then one per candidate (a candidate not timed has `median_ms` None and says why
    in `note`). `verified`: candidates the caller has just verified and accepted, these very
    files (a snapshot nothing writes to), which are timed without a second verification.
    `memo`: eager's and compile's rows kept from an earlier bench of the same case are reused
    (`BaselineMemo`); without one, they are timed every time."""
    case = case if isinstance(case, Case) else load_case(case)
    paths = candidate_files(candidates)
    dev = resolve_device(case, device)
    label = timing_label(dev)
    runner = as_target(target)
    set_name = input_set or default_input_set(case, dev)

    done = {Path(v).resolve() for v in verified}
    verdicts: dict[Path, tuple[bool, str]] = {p: (True, "") for p in paths if p.resolve() in done}
    todo = [p for p in paths if p not in verdicts]
    if todo and not unverified:
        for p, report in zip(todo, verify_candidates(case, todo, device=dev, target=runner,
                                                     timeout=timeout, on_line=on_line),
                                     strict=True):
            verdicts[p] = (report.accepted, "" if report.accepted else
                           f"rejected by verification ({', '.join(report.failed())})")

    resolved = case.input_set(set_name)
    specs = {k: s for k, s in input_keys(resolved).items() if isinstance(s, TensorSpec)}
    groups = {f"pool{i}": {k: draw_tensor(s, secrets.randbits(62)) for k, s in specs.items()}
              for i in range(POOL)}
    if dev == "cuda":  # the window the case's work calls for; the caller's options win
        from kopt.harness.roofline import timing_window

        timing_options = {**timing_window(case, set_name), **(timing_options or {})}
    request = {"device": dev, "precision": case.manifest.precision, "input_set": set_name,
               "interpret": dev == "cpu", "pool": [f"pool{i}" for i in range(POOL)],
               "check": "check", "timing_options": timing_options or {}}
    env = worker_env(dev)

    key = _memo_key(case, dev, set_name, timing_options, baselines) if memo is not None else ()
    base = memo.get(key) if memo is not None else None
    if base is not None:
        age = round(time.monotonic() - base.at, 1)
        rows = [{**r, "timed_s_ago": age} for r in base.rows]
    else:
        base = _time_baselines(case, runner, request, groups, specs, set_name, baselines, label,
                               env, timeout, on_line)
        if memo is not None:
            memo.put(key, base)
        rows = [dict(r) for r in base.rows]
    groups.update(check=base.check, weights=base.weights if base.weights is not None
                  else agent_provide_weights(case, set_name))  # kept on disk: re-made
    roof, reference = base.roof, base.reference

    for p in paths:
        accepted, why = verdicts.get(p, (False, "unverified"))
        name = p.stem
        if not unverified and not accepted:
            rows.append(_row(name, label, False, why))
            continue
        job_dir = stage_job("bench", {**request, "variants": ["candidate"]}, case=case,
                            candidate=p, tensors=groups)
        try:
            outcome = runner.run(job_dir, timeout=timeout, env=env, on_line=on_line)
            if not outcome.ok:
                rows.append(_row(name, label, accepted, f"failed: {outcome.failure_reason()}"))
                continue
            sample = load_outputs(job_dir / "out" / "check-candidate.safetensors")
            rows.append(_timed_row(name, label, accepted, outcome.response or {}, "candidate",
                                   roof, (sample, reference), case))
        finally:
            cleanup(job_dir)
    _speedups(rows)
    return rows


def _time_baselines(case: Case, runner: Any, request: dict[str, Any], groups: dict[str, Any],
                    specs: dict[str, TensorSpec], set_name: str, baselines: Sequence[str],
                    label: str, env: dict[str, str], timeout: float,
                    on_line: LineSink | None) -> _Baseline:
    """One baseline job: `baselines` timed on `groups`' pools beside fresh `check` values and
    the case's weights, in a worker that never sees candidate code."""
    check = {k: draw_tensor(s, secrets.randbits(62)) for k, s in specs.items()}
    weights = agent_provide_weights(case, set_name)
    base_dir = stage_job("bench", {**request, "variants": list(baselines)}, case=case,
                         tensors={**groups, "check": check, "weights": weights})
    try:
        outcome = runner.run(base_dir, timeout=timeout, env=env, on_line=on_line)
        if not outcome.ok:
            raise BadInputError(f"the baseline of case {case.name!r} failed to bench: "
                                f"{outcome.failure_reason()}",
                                fix=f"run `kopt baseline {case.name}` to see the error")
        resp = outcome.response or {}
        roof = resp.get("roofline") or {}
        return _Baseline(
            rows=tuple(_timed_row(v, label, True, resp, v, roof, None, case) for v in baselines),
            check=check, weights=weights,
            reference=load_outputs(base_dir / "out" / "check-eager.safetensors"),
            roof=roof, at=time.monotonic())
    finally:
        cleanup(base_dir)


BF16_STEPS = 2
"""How many bfloat16 rounding steps (2**-7 of a value, relative) an element of a timed
output sample may differ from the baseline's where the comparison is `rounding_only`."""


def _within_bf16_steps(out: list[torch.Tensor], ref: list[torch.Tensor]) -> bool:
    """Every floating element of `out` within `BF16_STEPS` bfloat16 steps of `ref`'s (and
    the same everywhere else): a stale output or a wrong element is far past that."""
    for o, r in zip(out, ref, strict=True):
        if not r.is_floating_point():
            if not torch.equal(o, r):
                return False
            continue
        o64, r64 = o.to(torch.float64), r.to(torch.float64)
        finite = torch.isfinite(r64)
        step = BF16_STEPS * 2.0 ** -7 * r64[finite].abs() + torch.finfo(torch.bfloat16).tiny
        if not bool(((o64[finite] - r64[finite]).abs() <= step).all()):
            return False
    return True


def _timed_row(name: str, label: str, verified: bool, resp: dict[str, Any], key: str,
               roof: dict[str, Any], sample: tuple[Any, Any] | None, case: Case) -> dict[str, Any]:
    row = _row(name, label, verified)
    result = (resp.get("variants") or {}).get(key) or {}
    if not result.get("ok"):
        row["note"] = f"failed: {result.get('error', 'no result')}"
        return row
    refusals = [f"clock replaced: {c}" for c in resp.get("clocks_tampered") or []]
    if key == "candidate":
        # The baseline's worker runs no candidate code; torch.compile itself patches
        # nn.Module and keeps a compile thread pool there.
        refusals += list(resp.get("tampering") or [])[:3]
        left = resp.get("leftovers") or {}
        running = left.get("threads", []) + left.get("processes", [])
        if running:
            refusals.append(f"left {len(running)} thread(s)/process(es) running: "
                            f"{', '.join(running[:2])}")
    if result.get("deferred_work"):
        refusals.append(str(result["deferred_work"]))
    if key == "candidate" and not result.get("launches_timed"):
        refusals.append("no Triton kernel launched during timing")
    if sample is not None:
        out, ref = sample
        if out is None or ref is None:
            refusals.append("no output sample after timing")
        else:
            tol = {dt: tolerance_for(case, dt) for dt in
                   (torch.float32, torch.float16, torch.bfloat16, torch.float64)}
            cmp = compare_outputs(out, ref, tol)
            # A reduction in another order misses single near-zero elements (within_norm);
            # an output whose norm cancels to near zero, or that an ill-conditioned step
            # (a group norm of values that differ in their fifth digit) makes as far from
            # the truth as the baseline's own rounding, misses only the whole-tensor bound
            # with every element inside its own (within_elementwise). The verifier takes
            # both the same way, and settles them against the float64 truth; a stale or
            # wrong output misses element-wise bounds. A model that rounds through bfloat16
            # inside (LLaMA's RMSNorm: `type_as(x)`, then a float32 weight) flips a few
            # elements by one bfloat16 step between two honest orders (128 of 33.5 M on an
            # H200): taken where the verifier takes it, and no element is off by more.
            if not (cmp.ok or cmp.within_allowance(tol, ref)
                    or (cmp.rounding_only() and _within_bf16_steps(out, ref))):
                refusals.append(f"output sample after timing is wrong: {cmp.to_text()[:300]}")
    t = result["timing"]
    median = float(t["median_ms"])
    floor = roof.get("floor_ms")
    copy_gbps = (roof.get("ceilings") or {}).get("copy_gbps")
    moved = roof.get("bytes") / (copy_gbps * 1e9) * 1e3 if roof.get("bytes") and copy_gbps else None
    if moved and median < moved / FLOOR_SLACK:
        refusals.append(f"impossible: {median:.4f} ms is faster than moving the case's "
                        f"{roof['bytes'] / 1e6:.1f} MB at the measured copy bandwidth "
                        f"({moved:.4f} ms)")
    if refusals:
        row["verified"] = False
        row["note"] = "refused: " + "; ".join(refusals)
        return row
    row.update(median_ms=median, p20_ms=float(t["p20_ms"]), p80_ms=float(t["p80_ms"]))
    if result.get("graphs"):  # an offline-engineer candidate: replayed from CUDA graphs or not
        row["graphs"] = result["graphs"]
    if key == "candidate" and isinstance(resp.get("steps"), dict):  # where the job's time went
        row["job_steps"] = {k: v for k, v in resp["steps"].items() if isinstance(v, int | float)}
    nbytes, flops = roof.get("bytes"), roof.get("flops")
    if nbytes:
        row["gbps"] = nbytes / (median * 1e-3) / 1e9
    if flops:
        row["tflops"] = flops / (median * 1e-3) / 1e12
    if floor:
        row["pct_of_floor"] = floor / median * 100.0
    if label != "cuda-events":
        row["note"] = "CPU interpreter: not a GPU timing"
    return row


def _speedups(rows: list[dict[str, Any]]) -> None:
    eager = next((r["median_ms"] for r in rows if r["variant"] == "eager"), None)
    compiled = next((r["median_ms"] for r in rows if r["variant"] == "compile"), None)
    for r in rows:
        m = r["median_ms"]
        if m:  # a Speedup knows its label: an interpreter figure is never written as one
            label = r.get("timing_label")
            r["speedup_vs_eager"] = Speedup(eager / m, label) if eager else None
            r["speedup_vs_compile"] = Speedup(compiled / m, label) if compiled else None
