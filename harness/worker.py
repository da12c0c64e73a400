"""The worker process: `python -m kopt.harness.worker JOB_DIR`.

Runs one job from `JOB_DIR/request.json` and writes `JOB_DIR/out/response.json`. Jobs are
the functions in `JOBS` (one module each under `harness/jobs/`); each takes the job
directory and the request and returns the response dict. Anything a job raises becomes
`{"ok": false, "error": "<type>: <message>"}`; a crash or hang is judged by the parent.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from kopt.harness.interpreter import interpreter_support

# job name -> "module:function"; imported lazily so a job pays only for what it uses.
JOBS: dict[str, str] = {
    "echo": "kopt.harness.jobs.echo:run",
    "measure": "kopt.harness.jobs.measure:run",
    "reference": "kopt.harness.jobs.reference:run",
    "candidate": "kopt.harness.jobs.candidate:run",
    "bench": "kopt.harness.jobs.bench:run",
    "tune": "kopt.harness.jobs.tune:run",
    "ceilings": "kopt.harness.jobs.ceilings:run",
}


def register_job(name: str, target: str) -> None:
    JOBS[name] = target


def _write_response(job_dir: Path, response: dict[str, Any]) -> None:
    out = job_dir / "out"
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / "response.json.tmp"
    tmp.write_text(json.dumps(response, default=str))
    tmp.replace(out / "response.json")


PARENT_ENV = "KOPT_WORKER_PARENT"
"""Set by the local target to its own pid: the worker is killed when that process dies."""


def _die_with_parent() -> None:
    """A local worker runs in its own session (a timeout kills its whole group), so a killed
    kopt would otherwise leave it running, still timing on the GPU under the next job. On
    Linux ask for SIGKILL when the parent dies (and exit now if it already has). Remote
    workers (ssh, detached jobs) do not set PARENT_ENV: they must survive a dropped link."""
    parent = os.environ.get(PARENT_ENV)
    if not parent or not sys.platform.startswith("linux"):
        return
    import ctypes
    import signal

    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if str(os.getppid()) != parent:
        os._exit(3)


STANDBY_FLAG = "--standby"
EARLY_CHILD = "kopt.harness.jobs.early:early_child"
"""What a standby's child forked before its job runs (imported in that child)."""


COMPILE_MODULES = (
    "torch._functorch.aot_autograd", "torch._dynamo.backends.debugging",
    "torch._dynamo.convert_frame", "torch._dynamo.symbolic_convert", "torch._dynamo.variables",
    "torch.fx.experimental.symbolic_shapes", "torch._subclasses.fake_tensor",
    "torch._higher_order_ops.triton_kernel_wrap", "sympy",
)
"""What the verifier's torch.compile draw (backend `aot_eager`) imports on its first compile."""


def preload_compile_modules() -> None:
    """Import, and only import, what dynamo's first compile would (COMPILE_MODULES): a GPU
    standby's candidate job runs one draw under torch.compile, 2.5 of a small candidate job's
    4 s on the H100 (2026-11-27). On a 2-core CPU a first small compile went 0.92 s -> 0.53 s
    with these imported. Nothing is compiled or run here (a compile would initialise CUDA, see
    `fork_safe`); a module missing from this torch is skipped."""
    import importlib

    for name in COMPILE_MODULES:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 (another torch's layout: the job imports it itself)
            continue


def fork_safe() -> bool:
    """Whether this process may still fork a candidate's child that uses the GPU: CUDA must
    not be initialised before the fork (the child would fail at its first CUDA call). A
    standby that finds it initialised after its imports leaves, so its job starts cold instead
    of failing: on 2026-11-27 a dynamo warm-up in the standby (reverted) initialised CUDA, and
    every candidate on the H100 was rejected at `loads`."""
    import torch

    return not torch.cuda.is_initialized()


def _standby() -> Path | None:
    """`--standby` (harness.targets.standby): import what every job needs, then wait for the
    job directory on stdin. None when stdin closes first (the standby was discarded)."""
    _die_with_parent()
    # dynamo: the candidate job's launch counter and dispatch modes need it (1.8 s on the H100
    # host), and the reference job's op recorder imports it at its first forward (skipped here
    # on 2026-11-28, the reference's forward step went 0.2 -> 1.5 s on the H100)
    import torch  # noqa: F401
    import torch._dynamo  # noqa: F401
    import triton  # noqa: F401
    import triton.language  # noqa: F401

    if not sys.flags.isolated and os.environ.get("TRITON_INTERPRET") != "1":
        preload_compile_modules()
    if not fork_safe():
        return None  # the job that would have taken it starts a cold worker instead
    if not sys.flags.isolated:  # the reference's interpreter never runs a candidate
        from kopt.harness.jobs import supervised

        supervised.fork_early(EARLY_CHILD)
    line = sys.stdin.readline().strip()
    if not line:
        return None
    given = json.loads(line)
    # kopt's own settings are the job's, not those of the job before it
    for key in [k for k in os.environ if k.startswith("KOPT_") and k != PARENT_ENV]:
        del os.environ[key]
    os.environ.update({str(k): str(v) for k, v in given.get("env", {}).items()})
    os.chdir(given["job_dir"])
    return Path(given["job_dir"])


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    started = "cold"
    if argv == [STANDBY_FLAG]:
        given = _standby()
        if given is None:
            os._exit(0)
        argv, started = [str(given)], "standby"
    if len(argv) != 1:
        print("usage: python -m kopt.harness.worker JOB_DIR", file=sys.stderr)
        return 2
    given_at = time.time()  # the wall clock: the parent compares it with its own
    job_dir = Path(argv[0]).resolve()
    _die_with_parent()
    request = json.loads((job_dir / "request.json").read_text())
    name = request.get("job")
    if name not in JOBS:
        _write_response(job_dir, {"ok": False, "error": f"unknown job {name!r}"})
        return 2
    from kopt.harness.jobs import supervised

    if name not in supervised.CHILDREN:  # a standby's early child must not hold the GPU
        supervised.drop_early()
    if request.get("interpret"):
        os.environ["TRITON_INTERPRET"] = "1"
        interpreter_support()
    module_name, func_name = JOBS[name].split(":")
    try:
        t0 = time.monotonic()
        func = getattr(importlib.import_module(module_name), func_name)
        imported = time.monotonic() - t0
        response = func(job_dir, request)
        if isinstance(response.get("steps"), dict):  # the job clocks its steps (harness.steps)
            response["steps"] = {"job code import": round(imported, 4), **response["steps"]}
        response.setdefault("ok", True)
        response.setdefault("worker_started", started)
        response.setdefault("isolated", bool(sys.flags.isolated and sys.flags.no_site))  # -I -S
        response.setdefault("sandbox", os.environ.get("KOPT_SANDBOXED", "none"))  # harness.sandbox
        response["given_at"] = given_at
    except BaseException as err:  # the job's failure is data for the parent
        traceback.print_exc()
        response = {"ok": False, "error": f"{type(err).__name__}: {err}".strip()[:2000],
                    "traceback": traceback.format_exc()[-4000:], "worker_started": started,
                    "isolated": bool(sys.flags.isolated and sys.flags.no_site)}
    response["responded_at"] = time.time()
    _write_response(job_dir, response)
    sys.stdout.flush()
    # Skip interpreter teardown: threads a candidate left behind must not keep us alive
    # and atexit hooks from candidate code must not run.
    os._exit(0)


if __name__ == "__main__":
    raise SystemExit(main())
