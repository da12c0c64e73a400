"""The `ray://host:port` target (a Ray cluster) and `ray://local` (a Ray runtime started here).

Each job is one Ray task running the same worker the local target runs: the job directory
travels as a tar in the task's arguments, the task runs `python -m kopt.harness.worker` in a
temporary directory with the timeout enforced on its process group, and `out/` comes back
in the result. A task asks for one GPU when the cluster has GPUs; on a CPU-only runtime (CI)
it asks for one CPU instead and `describe()` says so.

Ray re-runs a task whose worker process or node died (`max_retries`); once those retries are
spent the loss is a `TargetLost`, which `harness.parallel` re-queues on another target.

Output lines stream back as they are printed: the task sends each line to a small relay actor
(`_LineRelay`, no CPU of its own) and the caller drains it every `STREAM_POLL_S` while it
waits; the task's result carries the whole output too, so what the relay had not delivered
when the task ended still arrives, once.

Needs the `kopt[ray]` extra (`pip install 'kopt[ray]'`).
"""

from __future__ import annotations

import io
import os
import secrets
import tarfile
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from kopt.harness.errors import BadInputError, TargetError, TargetLost
from kopt.harness.targets.base import LineSink, WorkerOutcome, read_response, register_scheme

RESULT_GRACE_S = 120.0
"""Wait beyond the job's timeout for a task's result (scheduling, transfer)."""
STREAM_POLL_S = 0.25
"""How often the caller drains the line relay while a task runs."""
RELAY_NAME = "kopt-line-relay"
_INIT_LOCK = threading.Lock()


def _ray() -> Any:
    try:
        import ray
    except ImportError as err:
        raise TargetError("ray is not installed", fix="pip install 'kopt[ray]'") from err
    return ray


def _importable_harness() -> Path:
    """A `kopt` package holding `harness` (its __init__ and the harness source), staged once
    per process, for a remote cluster's `py_modules` (which ships one folder per module)."""
    import shutil
    import tempfile

    import kopt
    from kopt.harness.paths import PACKAGE_ROOT

    stage = Path(tempfile.mkdtemp(prefix="kopt-ray-")) / "kopt"
    shutil.copytree(PACKAGE_ROOT / "harness", stage / "harness",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    shutil.copy(kopt.__file__, stage / "__init__.py")
    return stage


class RayTarget:
    """Runs worker jobs as Ray tasks, one GPU (or one CPU without GPUs) each."""

    def __init__(self, spec: str, *, max_retries: int = 2, num_cpus: int | None = None) -> None:
        parts = urlsplit(spec)
        if parts.scheme != "ray" or not parts.netloc:
            raise BadInputError(f"bad ray target {spec!r}",
                                fix="expected ray://host:port (Ray client), ray://auto or ray://local")
        self.spec = spec
        self.name = spec
        self.address = parts.netloc
        self.max_retries = max_retries
        self.num_cpus = num_cpus
        """CPUs for a `ray://local` runtime (default: all)."""
        self._relay_handle: Any = None

    # -- connection ---------------------------------------------------------------------------

    def connect(self) -> Any:
        """Start or join the Ray runtime once per process."""
        ray = _ray()
        with _INIT_LOCK:
            if ray.is_initialized():
                return ray
            from kopt.harness.paths import import_root

            kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False,
                                      "ignore_reinit_error": True}
            if self.address == "local":
                kwargs["num_cpus"] = self.num_cpus
                # the workers are this machine's processes: make `harness` importable there
                kwargs["runtime_env"] = {"env_vars": {"PYTHONPATH": str(import_root())}}
            else:
                kwargs["address"] = "auto" if self.address == "auto" else f"ray://{self.address}"
                kwargs["runtime_env"] = {"py_modules": [str(_importable_harness())]}
            try:
                ray.init(**kwargs)
            except Exception as err:  # connection refused, version mismatch, ...
                raise TargetError(f"cannot reach Ray at {self.spec}: {str(err).splitlines()[0]}",
                                  fix="start the cluster (`ray start --head`) or check the "
                                      "address and that both sides run the same Ray version") from err
        return ray

    def resources(self) -> dict[str, float]:
        return dict(self.connect().cluster_resources())

    def task_resources(self) -> dict[str, float]:
        """One GPU per task when the cluster has GPUs, else one CPU."""
        return {"num_gpus": 1} if self.resources().get("GPU", 0) >= 1 else {"num_cpus": 1}

    def parallel_slots(self) -> list[Any]:
        """One slot per GPU in the cluster (CPUs without GPUs); Ray places the tasks, so a
        slot's GPU model is not known before its task runs (`gpu` None: each metrics file's
        environment names the GPU that produced it)."""
        from kopt.harness.parallel import Slot

        res = self.resources()
        count = int(res.get("GPU", 0)) or max(1, int(res.get("CPU", 1)))
        return [Slot(self) for _ in range(count)]

    # -- the Target protocol ------------------------------------------------------------------

    def run(self, job_dir: Path, *, timeout: float, env: dict[str, str] | None = None,
            on_line: LineSink | None = None) -> WorkerOutcome:
        ray = self.connect()
        job_dir = Path(job_dir)
        extra = {k: v for k, v in (env or {}).items()
                 if k not in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CUDA_VISIBLE_DEVICES")}
        remote = ray.remote(_run_job_task).options(max_retries=self.max_retries,
                                                   retry_exceptions=False, **self.task_resources())
        start = time.monotonic()
        relay = self._relay() if on_line is not None else None
        job_id = secrets.token_hex(8)
        delivered: dict[str, int] = {}
        ref = remote.remote(_pack(job_dir), timeout, extra, relay, job_id)
        try:
            deadline = start + timeout + RESULT_GRACE_S
            while not ray.wait([ref], timeout=STREAM_POLL_S)[0]:
                _drain(ray, relay, job_id, delivered, on_line)
                if time.monotonic() > deadline:
                    raise ray.exceptions.GetTimeoutError(f"no result after {deadline - start:.0f} s")
            _drain(ray, relay, job_id, delivered, on_line)
            result = ray.get(ref)
        except ray.exceptions.GetTimeoutError:
            ray.cancel(ref, force=True)
            return WorkerOutcome(None, True, None, host=self.name,
                                 elapsed_s=time.monotonic() - start)
        except (ray.exceptions.WorkerCrashedError, ray.exceptions.NodeDiedError,
                ray.exceptions.TaskCancelledError, ray.exceptions.RaySystemError,
                ray.exceptions.ObjectLostError) as err:
            raise TargetLost(f"{self.name} lost the job ({type(err).__name__}) after "
                             f"{self.max_retries} retries",
                             fix="check the cluster with `ray status`; kopt re-queues it elsewhere") from err
        except KeyboardInterrupt:
            ray.cancel(ref, force=True)
            raise
        finally:
            if relay is not None:
                relay.forget.remote(job_id)
        out = job_dir / "out"
        out.mkdir(exist_ok=True)
        with tarfile.open(fileobj=io.BytesIO(result["out"]), mode="r:*") as tar:
            for member in tar.getmembers():
                if member.isfile() and not member.name.startswith(("/", "..")) and \
                        ".." not in Path(member.name).parts:
                    dest = out / member.name
                    dest.parent.mkdir(parents=True, exist_ok=True)
                    source = tar.extractfile(member)
                    if source is not None:
                        dest.write_bytes(source.read())
        lines = result["output"].splitlines()
        if on_line is not None:  # what the relay had not delivered yet (none, usually)
            for line in lines[delivered.get(result["token"], 0):]:
                on_line(line)
        return WorkerOutcome(
            returncode=result["returncode"], timed_out=result["timed_out"],
            response=read_response(job_dir), output_tail="\n".join(lines[-60:]),
            host=f"{self.name} ({result['host']})", elapsed_s=result["elapsed_s"],
            extra={"ray_pid": result["pid"], "started_at": result["started_at"],
                   "ended_at": result["ended_at"], "resources": self.task_resources()})

    def _relay(self) -> Any:
        """The runtime's line relay actor (one per driver, created on first use)."""
        ray = self.connect()
        with _INIT_LOCK:
            if self._relay_handle is None:
                actor = ray.remote(num_cpus=0)(_LineRelay)
                self._relay_handle = actor.options(name=RELAY_NAME, get_if_exists=True).remote()
            return self._relay_handle

    def describe(self) -> dict[str, Any]:
        info: dict[str, Any] = {"target": self.name, "kind": "ray"}
        try:
            res = self.resources()
        except TargetError as err:
            return {**info, "reachable": False, "error": err.one_line()}
        info.update(reachable=True, cluster_resources=res,
                    nodes=len(self.connect().nodes()), task_resources=self.task_resources())
        if not res.get("GPU"):
            info["resources_note"] = "no GPUs in the Ray cluster: each task asks for 1 CPU"
        from kopt.harness.environment import describe_environment

        info.update({k: v for k, v in describe_environment().items()
                     if k in ("python", "torch", "triton", "host")})
        info["gpu"] = {"name": "ray cluster", "count": int(res["GPU"])} if res.get("GPU") else None
        return info


class _LineRelay:
    """A Ray actor holding the lines tasks printed until their caller drains them. Lines of one
    task arrive in order (one caller's actor calls run in submission order); each carries the
    task attempt's token, so a retried task's lines are counted apart."""

    def __init__(self) -> None:
        self.lines: dict[str, list[tuple[str, str]]] = {}

    def push(self, job_id: str, token: str, line: str) -> None:
        self.lines.setdefault(job_id, []).append((token, line))

    def pull(self, job_id: str) -> list[tuple[str, str]]:
        return self.lines.pop(job_id, [])

    def forget(self, job_id: str) -> None:
        self.lines.pop(job_id, None)


def _drain(ray: Any, relay: Any, job_id: str, delivered: dict[str, int],
           on_line: LineSink | None) -> None:
    """Hand the lines the relay holds for `job_id` to `on_line` (best effort: the task's
    result carries every line anyway)."""
    if relay is None or on_line is None:
        return
    try:
        pulled = ray.get(relay.pull.remote(job_id), timeout=30)
    except Exception:  # noqa: BLE001 - a lost relay only delays lines to the task's end
        return
    for token, line in pulled:
        delivered[token] = delivered.get(token, 0) + 1
        on_line(line)


def _pack(job_dir: Path) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz", compresslevel=1) as tar:
        for item in sorted(job_dir.iterdir()):
            if item.name != "out":
                tar.add(str(item), arcname=item.name)
    return buffer.getvalue()


def _run_job_task(packed: bytes, timeout: float, env: dict[str, str], relay: Any = None,
                  job_id: str = "") -> dict[str, Any]:
    """Inside the Ray worker: unpack, run the worker like the local target (each output line
    to `relay` as it is printed), pack `out/`."""
    import platform
    import tempfile

    from kopt.harness.targets.local import LocalTarget

    began = time.time()
    token = secrets.token_hex(4)
    with tempfile.TemporaryDirectory(prefix="kopt-ray-") as tmp:
        job_dir = Path(tmp) / "job"
        job_dir.mkdir()
        with tarfile.open(fileobj=io.BytesIO(packed), mode="r:*") as tar:
            tar.extractall(job_dir, filter="data")
        lines: list[str] = []

        def on_line(line: str) -> None:
            lines.append(line)
            if relay is not None:
                relay.push.remote(job_id, token, line)

        # one tensor/ceilings cache per node, not per job
        cache = {"KOPT_CACHE": os.environ.get("KOPT_CACHE") or
                 str(Path(tempfile.gettempdir()) / "kopt-ray-cache")}
        outcome = LocalTarget(standby=False).run(job_dir, timeout=timeout,
                                                 env={**cache, **env}, on_line=on_line)
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w:gz", compresslevel=1) as tar:
            if (job_dir / "out").is_dir():
                for item in sorted((job_dir / "out").iterdir()):
                    tar.add(str(item), arcname=item.name)
    return {"returncode": outcome.returncode, "timed_out": outcome.timed_out,
            "output": "\n".join(lines), "out": buffer.getvalue(), "host": platform.node(),
            "pid": os.getpid(), "elapsed_s": outcome.elapsed_s, "started_at": began,
            "ended_at": time.time(), "token": token}


register_scheme("ray", lambda spec: RayTarget(spec))
