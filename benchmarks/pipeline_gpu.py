"""On a GPU: a full `kopt run` of every bundled case with the offline engineer.

    python benchmarks/pipeline_gpu.py [--iterations N] [--cases a,b] [--budget-s SECONDS]
                                      [--case-cap-s SECONDS]

Each case runs architect -> optimizer -> accelerator -> integrator in a fresh git workspace
under a temp dir (KOPT_HOME), exactly as `kopt run CASE --engineer offline --yes --json`
does. Prints a markdown table last (for BENCHMARKS.md): case, speedup vs eager and vs
torch.compile, % of the roofline floor, final verdict, the accelerator's trials and the
kernel's commit on the run branch, and the seconds each phase took (architect / optimizer /
accelerator / integrator). A case that runs past --case-cap-s is stopped (Ctrl-C's path:
the run is cancelled cleanly) and its row says so. Timings are CUDA events on the main inputs.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _x(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}x"


class _PartTimer:
    """Wraps the harness functions a pipeline spends its time in and sums their seconds.

    Worker jobs are keyed by their kind (request.json's `job`); nested parts overlap (a
    verification's seconds include its worker jobs)."""

    PARTS = {
        "kopt.harness.verify": ["plan_draws", "verify_candidates"],
        "kopt.harness.job": ["stage_job"],
        "kopt.harness.runner": ["measure_variant"],
        "kopt.harness.tune": ["time_trials"],
        "kopt.harness.data": ["agent_provide_weights", "agent_provide_inputs"],
        "kopt.phases.engineers.offline.engineer": ["generate_candidate"],
    }

    def __init__(self) -> None:
        import importlib
        import json

        from kopt.harness.targets.local import LocalTarget
        from kopt.harness.verify import _Judge

        self.totals: dict[str, list[float]] = {}
        for mod_name, names in self.PARTS.items():
            mod = importlib.import_module(mod_name)
            for name in names:
                original = getattr(mod, name)
                wrapped = self._wrap(name, original)
                for other in list(sys.modules.values()):  # every `from x import name` too
                    if getattr(other, name, None) is original:
                        setattr(other, name, wrapped)
        run = LocalTarget.run

        def timed_run(target, job_dir, **kw):  # noqa: ANN001, ANN003
            try:
                kind = json.loads((Path(job_dir) / "request.json").read_text())["job"]
            except (OSError, ValueError, KeyError):
                kind = "?"
            return self._wrap(f"job:{kind}", run)(target, job_dir, **kw)

        LocalTarget.run = timed_run
        _Judge.checks = self._wrap("judge", _Judge.checks)

    def _wrap(self, key, fn):  # noqa: ANN001, ANN202
        def timed(*a, **kw):  # noqa: ANN002, ANN003, ANN202
            t0 = time.monotonic()
            try:
                return fn(*a, **kw)
            finally:
                self.totals.setdefault(key, []).append(time.monotonic() - t0)
        return timed

    def take(self) -> str:
        out = ", ".join(f"{k} {sum(v):.1f}s/{len(v)}" for k, v in
                        sorted(self.totals.items(), key=lambda kv: -sum(kv[1])))
        self.totals.clear()
        return out


def _print_why(details: dict) -> None:
    """The integrator's failed checks and the reason any variant has no median (a verified
    run can still lack torch.compile's figure)."""
    for check in details["verification"].get("checks") or []:
        if not check["passed"]:
            print(f"  failed check: {json.dumps(check, default=str)[:600]}", flush=True)
    for key, value in details["timing"].items():
        if key.endswith("_error") and value:
            print(f"  {key}: {value}", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--iterations", type=int, default=1)
    parser.add_argument("--cases", default=None, help="comma-separated (default: all bundled)")
    parser.add_argument("--budget-s", type=float, default=900.0,
                        help="stop starting new cases after this many seconds")
    parser.add_argument("--case-cap-s", type=float, default=150.0,
                        help="cancel a case's run after this many seconds")
    parser.add_argument("--parts", action="store_true",
                        help="also print where each case's seconds went (worker jobs by kind, "
                             "input draws, staging, judging, codegen)")
    args = parser.parse_args()

    home = Path(os.environ.get("KOPT_HOME") or tempfile.mkdtemp(prefix="kopt-pipeline-gpu-"))
    home.mkdir(parents=True, exist_ok=True)
    os.environ["KOPT_HOME"] = str(home)
    os.environ.pop("TRITON_INTERPRET", None)
    os.chdir(home)

    import torch

    from kopt.harness.case import Case, list_cases
    from kopt.phases.events import ITERATION, LOG, PHASE_FAILED, PHASE_FINISHED, PHASE_STARTED, Event
    from kopt.phases.history import get_run, init_workspace
    from kopt.phases.manifest import read_manifest
    from kopt.phases.pipeline import run_pipeline

    if not torch.cuda.is_available():
        print("no CUDA GPU: this benchmark needs one", file=sys.stderr)
        return 2
    init_workspace(home)
    parts = _PartTimer() if args.parts else None
    names = [c.name for c in list_cases() if isinstance(c, Case)]
    if args.cases:
        names = [n for n in names if n in args.cases.split(",")]
    started = time.monotonic()
    rows = []

    phase_s: dict[str, float] = {}
    phase_t0: dict[str, float] = {}

    def show(e: Event) -> None:
        now = time.monotonic()
        if e.kind == PHASE_STARTED:
            phase_t0[e.phase] = now
        if e.kind in (PHASE_FINISHED, PHASE_FAILED) and e.phase in phase_t0:
            phase_s[e.phase] = now - phase_t0.pop(e.phase)
        # a phase's failure lines ("failed: ...", "... was not timed: ...") say why
        why = e.kind == LOG and (e.message.startswith("failed") or "not timed" in e.message)
        if e.kind in (ITERATION, PHASE_FINISHED, PHASE_FAILED) or why:
            print(f"  [{now - started:6.1f}s] {e.phase}: {e.message}", flush=True)

    def phases_col() -> str:
        return " / ".join(f"{phase_s[p]:.0f}" if p in phase_s else
                          (f"{time.monotonic() - phase_t0[p]:.0f}!" if p in phase_t0 else "-")
                          for p in ("architect", "optimizer", "accelerator", "integrator"))

    for name in names:
        # a case that cannot finish inside the budget would be killed mid-integrator by the
        # device call's limit and leave no row: skip it instead
        if time.monotonic() - started + args.case_cap_s > args.budget_s:
            rows.append((name, "-", "-", "-", "skipped (budget)", "-", "-", "-", "-"))
            continue
        print(f"=== {name}", flush=True)
        t0 = time.monotonic()
        phase_s.clear()
        phase_t0.clear()
        cancel = threading.Event()
        timer = threading.Timer(args.case_cap_s, cancel.set)
        timer.start()
        try:
            r = run_pipeline(name, engineer="offline", iterations=args.iterations, events=show,
                             cancel=cancel)
        except Exception as err:  # noqa: BLE001 - one case failing is a row of the table
            why = (f"capped at {args.case_cap_s:.0f}s" if cancel.is_set()
                   else f"error: {str(err)[:60]}")
            rows.append((name, "-", "-", "-", why, "-", "-", phases_col(),
                         f"{time.monotonic() - t0:.0f}"))
            continue
        finally:
            timer.cancel()
        pct = trials = "-"
        commit = "-"
        final = home / "manifests" / r.run_id / "integrator.json"
        if final.is_file():
            m = read_manifest(final)
            p = m.details["timing"].get("pct_of_floor")
            pct = "-" if p is None else f"{p:.1f}%"
            commit = str(m.details["approval"].get("commit") or "-")[:10]
            _print_why(m.details)
        acc = home / "manifests" / r.run_id / "accelerator.json"
        if acc.is_file():
            details = read_manifest(acc).details
            b = details["budget"]
            # the default kept (no trial beat it by more than the noise) needs no new full
            # verification: the optimizer's verification of that same file stands
            kept = "default kept (optimizer's verification)" if not details["winner"]["changed"] \
                else "winner fully verified"
            trials = (f"{b['trials_run']}/{b.get('space_size', '?')}, {kept}, "
                      f"{len(b.get('fully_verified') or [])} trial(s) re-verified")
        run = get_run(r.run_id)
        it = f"{sum(i.verified for i in run.iterations)}/{len(run.iterations)}"
        rows.append((name, _x(r.speedup_vs_eager), _x(r.speedup_vs_compile), pct,
                     ("verified" if r.verified else "NOT verified") + f" ({it} iter ok)",
                     trials, commit, phases_col(), f"{time.monotonic() - t0:.0f}"))
        print(f"  done in {time.monotonic() - t0:.0f}s", flush=True)
        if parts is not None:
            print("  parts: " + parts.take(), flush=True)
        print("  row: | " + " | ".join(rows[-1]) + " |", flush=True)  # survives a later kill

    print()
    print(f"GPU: {torch.cuda.get_device_name(0)}; torch {torch.__version__}; offline engineer, "
          f"{args.iterations} optimizer round(s); CUDA-event timings on main inputs")
    print()
    print("| case | vs eager | vs torch.compile | % of floor | verdict | tuning trials | commit "
          "| arch / opt / accel / integ s | total s |")
    print("| --- | ---: | ---: | ---: | --- | ---: | --- | ---: | ---: |")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
