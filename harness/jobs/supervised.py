"""Candidate code runs in a forked child; the job's own process supervises it.

The worker process that takes a job (cold or a standby) has imported torch and triton and
nothing else. Before any candidate code exists it takes the staged inputs (into memory, or for
a candidate job into sealed memory files the child never inherits: the child closes every
descriptor but its link at once) and removes them from the job directory, opens a socket pair
and forks:

- the *child* imports the candidate and runs it; it reaches the harness only through its
  end of the socket (`Link`), and only after it reports "imported" does it receive inputs;
- the *supervisor* (this process, which never runs candidate code) sends inputs one request
  at a time, reads every fact and output as it is produced, kills the child's process group
  when the job ends, clears whatever the child wrote under `out/`, and only then writes the
  job's record (`out/*.safetensors`, the response). The parent reads files written by a
  process the candidate never ran in, after the candidate's process is gone.

Messages are `marshal`-encoded dicts of plain values, each prefixed by its length and its number
of attachments: bytes of `ATTACH_MIN` or more (tensors, as safetensors) leave the dict as raw
frames sent after it, so a 256 MB output is copied once on each side instead of three times
(marshal's copy, the length prefix's concatenation, the receiver's own); the child's encoder and socket calls are bound before the candidate
is imported, so replacing `json.dumps`, `sys.stdout` or `socket` changes nothing that is sent.
What the supervisor keeps of a message is a plain-value copy (`_plain`): nothing the child
sends can run code in the supervisor.
"""

from __future__ import annotations

import array
import marshal
import os
import shutil
import signal
import socket
import struct
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

MAX_MESSAGE = 1 << 34
"""16 GiB: the largest frame accepted (full-size outputs of a big case)."""
ATTACH_MIN = 1 << 16
"""Bytes values this long or longer travel as attachments (raw frames after the message)."""
MAX_ATTACHMENTS = 4096
_ATTACHED = "__kopt_attachment__"
"""The key of the placeholder an attachment leaves in its message: {_ATTACHED: index}."""
_SEALED = "__kopt_sealed__"
"""The key of the placeholder a sealed buffer leaves (harness.jobs.sealed): {_SEALED: index}
into the descriptors the frame's header carried."""
MAX_SEALED = 16
"""Most descriptors one message may carry."""


class ChannelClosed(Exception):
    """The other end of the link went away (the child died or exited)."""


class Link:
    """One end of the supervisor/child socket pair: length-prefixed marshal frames."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        # Bound now, before any candidate code: later replacements of these names are unseen.
        self._dumps, self._loads = marshal.dumps, marshal.loads
        self._pack, self._unpack = struct.pack, struct.unpack
        self._sendall, self._recv_into = sock.sendall, sock.recv_into
        self._sendmsg, self._recvmsg = sock.sendmsg, sock.recvmsg
        self._close_fd = os.close

    def send(self, msg: dict[str, Any]) -> None:
        attachments: list[bytes | bytearray | memoryview] = []
        sealed: list[Any] = []
        try:
            data = self._dumps(_wire(msg, attachments=attachments, sealed=sealed))
            header = self._pack("<QI", len(data), len(attachments))
            if sealed:  # the descriptors ride on the header's bytes (SCM_RIGHTS)
                fds = array.array("i", [b.fd for b in sealed])
                sent = self._sendmsg([header], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)])
                self._sendall(header[sent:] + data)
            else:
                self._sendall(header + data)
            for blob in attachments:
                self._sendall(self._pack("<Q", len(blob)))
                self._sendall(blob)
        except OSError as err:
            raise ChannelClosed(str(err)) from err
        finally:
            for b in sealed:  # the receiver has its own descriptors now
                self._close_fd(b.fd)

    def recv(self) -> dict[str, Any]:
        head, fds = self._read_header()
        received: list[Any] = []
        try:
            from kopt.harness.jobs.sealed import Sealed

            while fds:
                received.append(Sealed.receive(fds.pop(0)))
        except ValueError as err:
            for fd in fds:
                self._close_fd(fd)
            raise ChannelClosed(f"the other side sent {err}") from err
        size, count = self._unpack("<QI", head)
        if size > MAX_MESSAGE or count > MAX_ATTACHMENTS:
            raise ChannelClosed(f"frame of {size} bytes and {count} attachments")
        try:
            msg = self._loads(self._read(size))
        except (ValueError, EOFError, TypeError) as err:
            raise ChannelClosed(f"malformed frame: {err}") from err
        attachments = []
        for _ in range(count):
            (n,) = self._unpack("<Q", self._read(8))
            if n > MAX_MESSAGE:
                raise ChannelClosed(f"attachment of {n} bytes")
            attachments.append(self._read(n))
        return _plain(msg, attachments=attachments, sealed=received)

    def _read_header(self) -> tuple[bytes, list[int]]:
        """The frame's 12 header bytes and the descriptors that came with them."""
        buf, fds = b"", []
        while len(buf) < 12:
            try:
                data, ancillary, _flags, _addr = self._recvmsg(
                    12 - len(buf), socket.CMSG_SPACE(MAX_SEALED * 4))
            except OSError as err:
                raise ChannelClosed(str(err)) from err
            for level, kind, raw in ancillary:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    got = array.array("i")
                    got.frombytes(raw[:len(raw) - len(raw) % got.itemsize])
                    fds.extend(got)
            if not data:
                for fd in fds:
                    self._close_fd(fd)
                raise ChannelClosed("end of stream")
            buf += data
        return buf, fds

    def _read(self, n: int) -> bytes:
        buf = bytearray(n)
        view = memoryview(buf)
        got = 0
        while got < n:
            try:
                k = self._recv_into(view[got:])
            except OSError as err:
                raise ChannelClosed(str(err)) from err
            if k == 0:
                raise ChannelClosed("end of stream")
            got += k
        return bytes(buf)

    def close(self) -> None:
        try:
            self._sock.close()
        except OSError:
            pass


def _wire(value: Any, depth: int = 0, attachments: list[Any] | None = None,
          sealed: list[Any] | None = None) -> Any:
    """`value` in the types marshal carries: tuple subclasses (torch.Size) as lists, int and
    float subclasses and scalar objects (numpy, SymInt) as int/float, anything else as text.
    Bytes of ATTACH_MIN or more go to `attachments`, a placeholder in their place; a sealed
    buffer (harness.jobs.sealed.SealedBuffer) to `sealed`, likewise."""
    if isinstance(value, (bytes, bytearray, memoryview)) and attachments is not None and \
            len(value) >= ATTACH_MIN:
        attachments.append(value)
        return {_ATTACHED: len(attachments) - 1}
    if sealed is not None and type(value).__name__ == "SealedBuffer":
        if len(sealed) >= MAX_SEALED:
            raise ChannelClosed(f"more than {MAX_SEALED} sealed buffers in one message")
        sealed.append(value)
        return {_SEALED: len(sealed) - 1}
    if value is None or type(value) in (bool, int, float, str, bytes):
        return value
    if depth > 20:
        return repr(value)[:200]
    if isinstance(value, dict):
        return {str(k): _wire(v, depth + 1, attachments, sealed) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_wire(v, depth + 1, attachments, sealed) for v in value]
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, bool):
        return bool(value)
    if hasattr(value, "__index__"):
        return int(value.__index__())
    if hasattr(value, "__float__"):
        return float(value)
    return str(value)


def _plain(value: Any, depth: int = 0, attachments: list[bytes] | None = None,
           sealed: list[Any] | None = None) -> Any:
    """A copy made only of dict/list/str/bytes/int/float/bool/None (code objects, sets and
    anything else marshal can carry are refused); placeholders replaced by their attachment
    or their sealed buffer (harness.jobs.sealed.Sealed, verified sealed on receipt)."""
    if depth > 20:
        raise ChannelClosed("message nested too deeply")
    if value is None or isinstance(value, (bool, int, float, str, bytes)):
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v, depth + 1, attachments, sealed) for v in value]
    if isinstance(value, dict):
        if _ATTACHED in value:
            i = value[_ATTACHED]
            if len(value) != 1 or type(i) is not int or not 0 <= i < len(attachments or []):
                raise ChannelClosed(f"attachment placeholder {i!r} out of range")
            return attachments[i]  # type: ignore[index]
        if _SEALED in value:
            i = value[_SEALED]
            if len(value) != 1 or type(i) is not int or not 0 <= i < len(sealed or []):
                raise ChannelClosed(f"sealed buffer placeholder {i!r} out of range")
            return sealed[i]  # type: ignore[index]
        return {str(k): _plain(v, depth + 1, attachments, sealed) for k, v in value.items()
                if isinstance(k, str)}
    raise ChannelClosed(f"message holds a {type(value).__name__}")


def take_staged_inputs(job_dir: Path, sealed: bool = False) -> dict[str, Any]:
    """`inputs/<name>.safetensors` as bytes, then the folder removed: nothing the candidate
    could read at import time is left on disk. `sealed`: each file in a sealed memory file
    instead (harness.jobs.sealed.seal_file, a `SealedBuffer`: copied by the kernel, never in
    this process's memory, so a child forked later inherits no draw's values; bytes where the
    system has no sealed memfds)."""
    from kopt.harness.jobs.sealed import seal_file

    folder = job_dir / "inputs"
    staged: dict[str, Any] = {}
    if folder.is_dir():
        try:
            for file in sorted(folder.glob("*.safetensors")):
                staged[file.stem] = (sealed and seal_file(file)) or file.read_bytes()
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    return staged


def fork_child(child_main: Callable[[Link], None]) -> tuple[int, Link]:
    """Fork; the child runs `child_main(link)` in its own process group and exits with
    `os._exit` (no interpreter teardown, no atexit hook of candidate code)."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the child
        code = 0
        try:
            ours.close()
            _close_inherited(theirs.fileno())
            os.setpgid(0, 0)
            _die_with_supervisor()
            child_main(Link(theirs))
        except BaseException:  # noqa: BLE001 (what failed is reported through the link)
            code = 1
        finally:
            try:
                sys.stdout.flush()
                sys.stderr.flush()
            finally:
                os._exit(code)
    theirs.close()
    return pid, Link(ours)


_EARLY: tuple[int, Link] | None = None
"""A child forked before this process had a job (`fork_early`), waiting for one."""


def fork_early(target: str) -> None:
    """Fork a child now, before any job, that runs `target` ("module:function", imported in
    the child: harness.jobs.early.early_child): a standby's (harness.worker) child does its own
    start (imports, CUDA, Triton's first launch) while the parent still waits, then waits for
    the job on its link (`take_early`). One at a time."""
    global _EARLY
    drop_early()
    _EARLY = fork_child(lambda link: _function(target)(link))


def take_early() -> tuple[int, Link] | None:
    """The child `fork_early` started, if it is still alive (this process's to drive now)."""
    global _EARLY
    early, _EARLY = _EARLY, None
    if early is None:
        return None
    try:
        done, _raw = os.waitpid(early[0], os.WNOHANG)
    except ChildProcessError:
        done = early[0]
    if done:  # it died while waiting: the job forks its own
        early[1].close()
        return None
    return early


def drop_early() -> None:
    """End the early child unused (a job that runs no candidate: it must not hold the GPU)."""
    early = take_early()
    if early is not None:
        end_child(*early)


CHILDREN = {
    "candidate": "kopt.harness.jobs.candidate:_child",
    "measure": "kopt.harness.jobs.measure:_child",
    "bench": "kopt.harness.jobs.bench:_bench_child",
}
"""The jobs whose candidate runs in a forked child, and that child's function:
`f(link, job_dir, request, warmed=None)` (`warmed`: the device an early child has already
started, CUDA's context and a first harness Triton launch made)."""


def _function(target: str) -> Callable[..., None]:
    import importlib

    module, name = target.split(":")
    return getattr(importlib.import_module(module), name)


def child_function(kind: str) -> Callable[..., None]:
    """The child function of a job kind (`CHILDREN`)."""
    return _function(CHILDREN[kind])


def start_child(kind: str, job_dir: Path, request: dict[str, Any]) -> tuple[int, Link, bool]:
    """The job's child, `(pid, link, early)`: the standby's early child told its job when
    there is one (harness.jobs.early), else one forked now."""
    early = take_early()
    if early is not None:
        try:
            early[1].send({"op": "job", "kind": kind, "job_dir": str(job_dir),
                           "request": request, "env": dict(os.environ), "cwd": os.getcwd(),
                           "sent_at": time.time()})
            return early[0], early[1], True
        except (ChannelClosed, OSError):
            end_child(*early)
    child = child_function(kind)
    pid, link = fork_child(lambda lk: child(lk, job_dir, request))
    return pid, link, False


def _close_inherited(link_fd: int) -> None:
    """In a child just forked: close every descriptor it inherited but standard input, output,
    error and its end of the link. The supervisor's staged draws (sealed memory files, harness.
    jobs.sealed), its connection to whoever sent the job and any file it had open stay the
    supervisor's: candidate code in the child cannot read another draw's values through
    /proc/self/fd."""
    os.closerange(3, link_fd)
    os.closerange(link_fd + 1, _max_fd())


def _max_fd() -> int:
    try:
        import resource

        soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if 0 < soft <= 1 << 20:
            return soft
    except (ImportError, OSError, ValueError):
        pass
    return 1 << 16


def _die_with_supervisor() -> None:
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def end_child(pid: int, link: Link) -> int | None:
    """Kill the child's whole process group and reap it; its exit status (negative: the
    signal that ended it before we did), or None if it was still running."""
    link.close()
    status: int | None = None
    for _ in range(20):  # a child that closed the link is usually exiting: its status says how
        try:
            done, raw = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            break
        if done:
            status = os.waitstatus_to_exitcode(raw)
            break
        time.sleep(0.05)
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    if status is None:
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass
    return status


def clear_out(job_dir: Path) -> Path:
    """Remove whatever is under `out/` (the child may have written there) and return it."""
    out = job_dir / "out"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True, exist_ok=True)
    return out
