"""The `ssh://[user@]host[:port][/remote/workspace]` target: the same worker, on another host.

Uses the system OpenSSH client, so the user's `~/.ssh/config`, agent and `known_hosts` apply
as they do for `ssh`; host keys are verified (BatchMode: an unknown key is an error, never a
prompt). Connections are multiplexed (ControlMaster) so the several calls of one job cost one
handshake.

On the remote, a small stdlib-only agent (harness/targets/ssh_agent.py, shipped inline with `python3 -c`) keeps a
workspace (default `~/.kopt-remote`):

    blobs/<sha256>          content store: a file is pushed once, whatever job needs it
    src/<tree-hash>/harness the kopt source the worker imports (one tree per version)
    jobs/<id>/              a job directory (copied from blobs/) + worker.log, status.json

Finished jobs and blobs unused for 3 days are pruned when a job starts.

A job runs under a detached supervisor (its own session, output to `worker.log`), which
enforces the timeout by killing the worker's whole process group. The worker runs inside the
remote host's sandbox (`python -m kopt.harness.sandbox exec`, harness/sandbox.py) unless the
job was started with the sandbox off; a host that cannot enforce it says so in the log. The local side follows the
log from a byte offset, so a dropped connection is re-attached without losing or repeating a
line, and `kopt jobs attach ID` can pick a job up later from another process.

Query options on the spec: `?python=/path/to/python` (default `python3`), `?source=installed`
(the remote has kopt installed: do not push the source). `targets.yaml` can set the same and
`ssh_config`, `identity_file`, `known_hosts`, `ssh_options`.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shlex
import subprocess
import tarfile
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from kopt.harness import sandbox
from kopt.harness.errors import BadInputError, TargetError, TargetLost
from kopt.harness.targets import jobs as job_records
from kopt.harness.targets.base import LineSink, WorkerOutcome, read_response, register_scheme
from kopt.harness.targets.ssh_agent import BOOTSTRAP
from kopt.harness.targets.ssh_files import (
    Entry,
    LineAssembler,
    control_dir,
    first_line,
    probe_cache_file,
    read_fresh,
    read_request,
    safe_extract,
    source_manifest,
    tree_hash,
    tree_manifest,
)

SECRET_ENV = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN")
CONNECT_TIMEOUT_S = 10
RECONNECT_WINDOW_S = 60.0
"""How long a job's connection may stay down before the job counts as lost here."""
FOLLOW_GRACE_S = 60.0
"""Extra wait beyond the job's timeout for the remote supervisor to report (slow links)."""
DISK_MARGIN_BYTES = 64 * 2**20
PROBE_TTL_S = 600.0
"""A remote's versions are re-probed (importing torch there: seconds) at most this often."""


@dataclass(frozen=True)
class SshSpec:
    """A parsed `ssh://[user@]host[:port][/workspace][?python=..&source=installed]`."""

    host: str
    user: str | None = None
    port: int | None = None
    workspace: str = "~/.kopt-remote"
    python: str = "python3"
    push_source: bool = True

    @property
    def url(self) -> str:
        who = f"{self.user}@" if self.user else ""
        port = f":{self.port}" if self.port else ""
        return f"ssh://{who}{self.host}{port}"


def parse_spec(spec: str) -> SshSpec:
    parts = urlsplit(spec)
    if parts.scheme != "ssh" or not parts.hostname:
        raise BadInputError(f"bad ssh target {spec!r}",
                            fix="expected ssh://[user@]host[:port][/remote/workspace]")
    if not re.fullmatch(r"[A-Za-z0-9._-]+|[0-9A-Fa-f:.]+", parts.hostname):
        raise BadInputError(f"bad host {parts.hostname!r} in ssh target {spec!r}",
                            fix="a host name or address: letters, digits, '.', '-' and ':'")
    try:
        port = parts.port
    except ValueError as err:
        raise BadInputError(f"bad port in ssh target {spec!r}", fix="the port is a number") from err
    workspace = parts.path or "~/.kopt-remote"
    if workspace.startswith("/~"):
        workspace = workspace[1:]  # ssh://host/~/kopt is home-relative
    query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
    unknown = set(query) - {"python", "source"}
    if unknown:
        raise BadInputError(f"unknown option {sorted(unknown)[0]!r} in ssh target {spec!r}",
                            fix="expected ?python=PATH or ?source=installed")
    return SshSpec(host=parts.hostname, user=parts.username, port=port, workspace=workspace,
                   python=query.get("python", "python3"),
                   push_source=query.get("source", "push") != "installed")


@dataclass
class SshOptions:
    """Client settings beyond the spec (from `targets.yaml`)."""

    ssh_config: str | None = None
    """`-F FILE` instead of ~/.ssh/config (also `$KOPT_SSH_CONFIG`)."""
    identity_file: str | None = None
    known_hosts: str | None = None
    ssh_options: list[str] = field(default_factory=list)
    """Extra `-o Key=Value` options."""
    multiplex: bool = True


class SshTarget:
    """Runs worker jobs on a host reached with the system `ssh` client."""

    def __init__(self, spec: str, *, options: SshOptions | None = None,
                 python: str | None = None, push_source: bool | None = None) -> None:
        self.spec = spec
        parsed = parse_spec(spec)
        if python is not None or push_source is not None:
            parsed = SshSpec(host=parsed.host, user=parsed.user, port=parsed.port,
                             workspace=parsed.workspace, python=python or parsed.python,
                             push_source=parsed.push_source if push_source is None else push_source)
        self.parsed = parsed
        self.options = options or SshOptions()
        self.name = parsed.url
        self.record_spec = spec
        """How job records name this target: the spec, or its name in targets.yaml."""
        self._probe: dict[str, Any] | None = None
        self._lock = threading.Lock()
        self._push_lock = threading.Lock()
        """One push at a time: the slots of a multi-GPU remote start jobs at once, and two
        pushes of one missing source tree would rewrite its files under a starting worker."""
        self.last_push: dict[str, int] = {}
        """Files and bytes the last push actually sent (unchanged content is not resent)."""
        self.follow_process: subprocess.Popen[bytes] | None = None
        """The `ssh` process streaming the current job's log (tests cut it to drop the link)."""

    # -- the Target protocol ------------------------------------------------------------------

    def run(self, job_dir: Path, *, timeout: float, env: dict[str, str] | None = None,
            on_line: LineSink | None = None) -> WorkerOutcome:
        record = self.start(job_dir, timeout=timeout, env=env)
        try:
            return self.attach(record, on_line=on_line)
        except KeyboardInterrupt:  # Ctrl-C here ends the job there, as for a local worker
            self.cancel(record)
            raise

    def describe(self) -> dict[str, Any]:
        """Reachability, versions, GPU and free disk of the remote (never raises)."""
        info: dict[str, Any] = {"target": self.name, "kind": "ssh",
                                "workspace": self.parsed.workspace,
                                "python_command": self.parsed.python}
        try:
            probe = self.probe(refresh=True)
        except TargetError as err:
            return {**info, "reachable": False, "error": err.one_line()}
        return {**info, "reachable": True, **probe}

    def parallel_slots(self) -> list[Any]:
        """One slot per remote GPU (pinned with CUDA_VISIBLE_DEVICES), or one without a GPU."""
        from kopt.harness.parallel import Slot

        gpu = self.probe().get("gpu") or {}
        count = int(gpu.get("count") or 0)
        if not count:
            return [Slot(self)]
        return [Slot(self, {"CUDA_VISIBLE_DEVICES": str(i)}, gpu=f"{gpu.get('name')} #{i}")
                for i in range(count)]

    # -- detached jobs ------------------------------------------------------------------------

    def start(self, job_dir: Path, *, timeout: float, env: dict[str, str] | None = None,
              note: str = "") -> job_records.JobRecord:
        """Push `job_dir` and start its worker on the remote, detached; returns at once."""
        job_dir = Path(job_dir).resolve()
        request = read_request(job_dir)
        probe = self.probe()
        self._check_requirements(probe, request)
        job_id = job_records.new_job_id()
        remote_dir = f"jobs/{job_id}"
        trees = {remote_dir: tree_manifest(job_dir, skip_top=("out",))}
        src = ""
        if self.parsed.push_source:
            source = source_manifest()
            src = "src/" + tree_hash(source)
            trees[src] = source
        with self._push_lock:
            self._push(trees, probe)
        extra = {k: v for k, v in (env or {}).items() if k not in SECRET_ENV}
        args = {"job": remote_dir, "src": src, "timeout": timeout, "env": extra,
                "python": self.parsed.python, "sandbox": sandbox.enabled()}
        self._call("start", payload=json.dumps(args).encode(), timeout=CONNECT_TIMEOUT_S * 3)
        record = job_records.JobRecord(
            id=job_id, target=self.record_spec, job=str(request.get("job", "?")), local_dir=str(job_dir),
            remote_dir=remote_dir, timeout_s=timeout, note=note)
        job_records.save(record)
        job_records.prune()
        return record

    def attach(self, record: job_records.JobRecord, *, on_line: LineSink | None = None,
               offset: int = 0) -> WorkerOutcome:
        """Stream the job's output from byte `offset` until it ends, then bring `out/` back.

        A dropped connection is retried for `RECONNECT_WINDOW_S`; after that `TargetLost`
        (the job goes on remotely; `kopt jobs attach` picks it up)."""
        tail: deque[str] = deque(maxlen=60)
        deadline = record.started_at + record.timeout_s + FOLLOW_GRACE_S
        down_since: float | None = None
        last_error = ""
        while True:
            sink = LineAssembler(tail, on_line)
            code, err = self._follow(record, offset, sink, deadline)
            offset += sink.bytes_seen
            if code == 0:
                sink.flush()
                break
            if code == 3:
                raise TargetError(f"job {record.id} is gone from {self.name}",
                                  fix="its remote directory was removed; run it again")
            if time.time() > deadline:
                ended = self._end_overdue(record, tail)
                if ended is not None:
                    return ended
                continue  # it had ended after all: follow the rest of the log, then collect
            now = time.monotonic()
            down_since = down_since if down_since is not None and sink.bytes_seen == 0 else now
            last_error = err or last_error
            if now - down_since > RECONNECT_WINDOW_S:
                job_records.update(record, state="running")
                raise TargetLost(f"lost the connection to {self.name} during job {record.id} "
                                 f"({first_line(last_error) or 'ssh exited'})",
                                 fix=f"it goes on there: `kopt jobs attach {record.id}`")
            time.sleep(1.0)
        return self._collect(record, tail)

    def _end_overdue(self, record: job_records.JobRecord,
                     tail: deque[str]) -> WorkerOutcome | None:
        """Past the deadline with no end seen: cancel it there, or find it already ended."""
        result = self.cancel(record)
        if result.get("error"):
            raise TargetLost(f"lost {self.name} while job {record.id} ran ({result['error']})",
                             fix=f"check the host, then `kopt jobs attach {record.id}`")
        if not result.get("cancelled") and result.get("state") != "running":
            return None
        job_records.update(record, state="timed_out")
        return WorkerOutcome(returncode=None, timed_out=True, response=None,
                             output_tail="\n".join(tail), host=self.name,
                             elapsed_s=time.time() - record.started_at)

    def status(self, record: job_records.JobRecord) -> dict[str, Any]:
        """The remote's view of a job: `state` running/done/timed_out/cancelled/lost/missing."""
        out = self._call("status", payload=json.dumps({"job": record.remote_dir}).encode(),
                         timeout=CONNECT_TIMEOUT_S * 3)
        return json.loads(out.decode() or "{}")

    def cancel(self, record: job_records.JobRecord) -> dict[str, Any]:
        try:
            out = self._call("cancel", payload=json.dumps({"job": record.remote_dir}).encode(),
                             timeout=CONNECT_TIMEOUT_S * 3)
            result = json.loads(out.decode() or "{}")
        except TargetError as err:
            return {"cancelled": False, "error": err.one_line()}
        if result.get("cancelled"):
            job_records.update(record, state="cancelled")
        return result

    # -- remote checks ------------------------------------------------------------------------

    def probe(self, *, refresh: bool = False) -> dict[str, Any]:
        """Python/torch/triton versions, GPU and free disk of the remote (cached)."""
        with self._lock:
            cache = probe_cache_file(f"{self.spec}|{self.parsed.python}|{self.parsed.workspace}")
            if self._probe is None and not refresh:
                self._probe = read_fresh(cache, PROBE_TTL_S)
            if self._probe is None or refresh:
                out = self._call("probe", payload=json.dumps({}).encode(), timeout=120)
                try:
                    self._probe = json.loads(out.decode().strip().splitlines()[-1])
                except (ValueError, IndexError) as err:
                    raise TargetError(f"{self.name}: the remote agent gave no answer",
                                      fix=f"check `ssh {self.parsed.host} {self.parsed.python} -V`") from err
                cache.parent.mkdir(parents=True, exist_ok=True)
                cache.write_text(json.dumps(self._probe))
            return dict(self._probe)

    def _check_requirements(self, probe: dict[str, Any], request: dict[str, Any]) -> None:
        py = self.parsed.python
        needed = ("torch",) if request.get("job") == "echo" else ("torch", "triton")
        for package in needed:
            if not probe.get(package):
                reason = probe.get(f"{package}_error") or "not importable"
                raise TargetError(f"{package} is missing on {self.name} for {py}: {reason}",
                                  fix=f"install it there with `{py} -m pip install {package}`, or point "
                                      f"?python= at an environment that has it")
        if str(request.get("device", "")).startswith("cuda") and not probe.get("gpu"):
            raise TargetError(f"no CUDA GPU on {self.name}: torch {probe.get('torch')} sees none",
                              fix="use --device cpu for the Triton interpreter, or a target with a GPU")

    # -- pushing files ------------------------------------------------------------------------

    def _push(self, trees: dict[str, dict[str, Entry]], probe: dict[str, Any]) -> None:
        blobs = {e.sha: e for tree in trees.values() for e in tree.values()}
        query = {"blobs": sorted(blobs), "trees": sorted(trees)}
        answer = json.loads(self._call("missing", payload=json.dumps(query).encode(),
                                       timeout=CONNECT_TIMEOUT_S * 3).decode())
        missing_trees = {name: trees[name] for name in answer["trees"]}
        self.last_push = {"files": 0, "bytes": 0}
        if not missing_trees:
            return
        wanted = {e.sha for tree in missing_trees.values() for e in tree.values()}
        send = [blobs[sha] for sha in sorted(wanted & set(answer["blobs"]))]
        size = sum(e.size for e in send)
        free = probe.get("disk_free_bytes")
        if isinstance(free, int) and free < size + DISK_MARGIN_BYTES:
            raise TargetError(f"remote disk full on {self.name}: {free // 2**20} MiB free in "
                              f"{self.parsed.workspace}, need {(size + DISK_MARGIN_BYTES) // 2**20} MiB",
                              fix="free space there or give another /remote/workspace in the spec")
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w:gz", compresslevel=1) as tar:
            for entry in send:
                tar.add(str(entry.path), arcname=f"blobs/{entry.sha}", recursive=False)
            layout = {name: {rel: [e.sha, e.mode] for rel, e in tree.items()}
                      for name, tree in missing_trees.items()}
            data = json.dumps(layout).encode()
            info = tarfile.TarInfo("trees.json")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        self._call("receive", payload=buffer.getvalue(), timeout=600)
        self.last_push = {"files": len(send), "bytes": size}

    # -- following and collecting -------------------------------------------------------------

    def _follow(self, record: job_records.JobRecord, offset: int, sink: LineAssembler,
                deadline: float) -> tuple[int, str]:
        payload = json.dumps({"job": record.remote_dir, "offset": offset}).encode()
        proc = subprocess.Popen(self._ssh_command(self._agent_command("follow")),
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, start_new_session=True)
        self.follow_process = proc
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        try:
            proc.stdin.write(payload)
            proc.stdin.close()
        except BrokenPipeError:
            pass
        errors: list[bytes] = []
        drain = threading.Thread(target=lambda: errors.append(proc.stderr.read()), daemon=True)
        drain.start()
        watchdog = threading.Timer(max(30.0, deadline - time.time()), proc.kill)
        watchdog.daemon = True
        watchdog.start()
        try:
            for chunk in iter(lambda: proc.stdout.read1(65536), b""):
                sink.feed(chunk)
            code = proc.wait()
        except BaseException:
            proc.kill()
            proc.wait()
            raise
        finally:
            watchdog.cancel()
            self.follow_process = None
        drain.join(timeout=5)
        return code, b"".join(errors).decode(errors="replace")

    def _collect(self, record: job_records.JobRecord, tail: deque[str]) -> WorkerOutcome:
        data = self._call("fetch", payload=json.dumps({"job": record.remote_dir}).encode(),
                          timeout=600)
        job_dir = Path(record.local_dir)
        status: dict[str, Any] = {}
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:*") as tar:
            for member in tar.getmembers():
                if member.name == "status.json":
                    file = tar.extractfile(member)
                    status = json.loads(file.read()) if file else {}
                elif member.name == "out" or member.name.startswith("out/"):
                    safe_extract(tar, member, job_dir)
        timed_out = bool(status.get("timed_out"))
        state = "timed_out" if timed_out else "cancelled" if status.get("cancelled") else "fetched"
        job_records.update(record, state=state, returncode=status.get("returncode"))
        return WorkerOutcome(
            returncode=None if timed_out else status.get("returncode"),
            timed_out=timed_out,
            response=read_response(job_dir),
            output_tail="\n".join(tail),
            host=self.name,
            elapsed_s=float(status.get("elapsed_s") or 0.0),
            extra={"job_id": record.id, "remote_host": status.get("host")},
        )

    # -- ssh plumbing -------------------------------------------------------------------------

    def _ssh_command(self, remote: str) -> list[str]:
        p, o = self.parsed, self.options
        cmd = ["ssh", "-o", "BatchMode=yes", "-o", f"ConnectTimeout={CONNECT_TIMEOUT_S}",
               "-o", "ServerAliveInterval=5", "-o", "ServerAliveCountMax=3", "-T"]
        config = o.ssh_config or os.environ.get("KOPT_SSH_CONFIG")
        if config:
            cmd += ["-F", config]
        if o.identity_file:
            cmd += ["-i", o.identity_file, "-o", "IdentitiesOnly=yes"]
        if o.known_hosts:
            cmd += ["-o", f"UserKnownHostsFile={o.known_hosts}"]
        if o.multiplex:
            # one master per (host, port, user) *and* client settings: a connection made with
            # one key or known_hosts file must never be reused by a target that sets others
            settings = hashlib.sha256(repr((config, o.identity_file, o.known_hosts,
                                            o.ssh_options)).encode()).hexdigest()[:8]
            cmd += ["-o", "ControlMaster=auto",
                    "-o", f"ControlPath={control_dir()}/{settings}-%C",
                    "-o", "ControlPersist=60"]
        for option in o.ssh_options:
            cmd += ["-o", option]
        if p.port:
            cmd += ["-p", str(p.port)]
        if p.user:
            cmd += ["-l", p.user]
        return [*cmd, p.host, remote]

    def _agent_command(self, action: str) -> str:
        return (f"{shlex.quote(self.parsed.python)} -c {shlex.quote(BOOTSTRAP)} "
                f"{action} {shlex.quote(self.parsed.workspace)}")

    def _call(self, action: str, *, payload: bytes, timeout: float) -> bytes:
        """Run one agent action; its stdout, or a one-line `TargetError` naming the fix."""
        try:
            done = subprocess.run(self._ssh_command(self._agent_command(action)), input=payload,
                                  capture_output=True, timeout=timeout)
        except subprocess.TimeoutExpired as err:
            raise TargetLost(f"{self.name} did not answer within {timeout:.0f} s ({action})",
                             fix="check the host and the network, then retry") from err
        except FileNotFoundError as err:
            raise TargetError("no `ssh` client on this machine",
                              fix="install OpenSSH: apt-get install openssh-client") from err
        if done.returncode != 0:
            raise self._explain(action, done.returncode, done.stderr.decode(errors="replace"))
        return done.stdout

    def _explain(self, action: str, code: int, stderr: str) -> TargetError:
        """Turn ssh's and the agent's failures into one line that names the fix."""
        p = self.parsed
        text = stderr.strip()
        port = f" -p {p.port}" if p.port else ""
        who = f"{p.user}@{p.host}" if p.user else p.host
        low = text.lower()
        if "host key verification failed" in low or "no matching host key" in low:
            if "remote host identification has changed" in low:
                return TargetError(f"the host key of {self.name} has CHANGED",
                                   fix="if the change is expected, remove the old key with "
                                       f"`ssh-keygen -R {p.host}` and check the new fingerprint")
            return TargetError(f"unknown host key for {self.name}",
                               fix=f"check its fingerprint, then `ssh{port} {who} true` once "
                                   "to add it to known_hosts (kopt never accepts keys silently)")
        if "permission denied" in low and code == 255:
            return TargetError(f"authentication failed for {who} on {self.name}",
                               fix="add your public key to the remote's ~/.ssh/authorized_keys, "
                                   "load it with ssh-add, or set identity_file in targets.yaml")
        for marker in ("could not resolve hostname", "connection refused", "timed out",
                       "no route to host", "network is unreachable", "connection closed by",
                       "connection reset"):
            if marker in low and code == 255:
                return TargetLost(f"{self.name} is unreachable: {first_line(text, marker)}",
                                  fix=f"check the host is up and sshd listens there: "
                                      f"`ssh{port} {who} true`")
        if "no space left on device" in low or code == 28:
            return TargetError(f"remote disk full on {self.name} ({p.workspace})",
                               fix="free space there or give another /remote/workspace in the spec")
        if code == 127 or "command not found" in low or "no such file or directory" in low and \
                p.python in text:
            return TargetError(f"no Python at {p.python!r} on {self.name}",
                               fix="install python3 there, or give ?python=/path/to/python in the "
                                   "spec or python: in targets.yaml")
        if code == 255:
            return TargetLost(f"ssh to {self.name} failed: {first_line(text) or 'exit 255'}",
                              fix=f"try `ssh{port} {who} true` to see why")
        return TargetError(f"{action} on {self.name} failed (exit {code}): "
                           f"{first_line(text, None, last=True) or 'no output'}",
                           fix="run `kopt targets` to check the remote")


def _factory(spec: str) -> SshTarget:
    return SshTarget(spec)


register_scheme("ssh", _factory)
