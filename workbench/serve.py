"""A warm `kopt` for quick commands: `kopt serve` keeps torch imported and workers waiting, and
`kopt verify` / `kopt bench` run inside it when it is there.

A `kopt verify` of a small candidate spends as much time around its verification as in it:
the command's own Python start and `import torch` (1.6-3.0 s on the H200 hosts of 2026-11-28,
`benchmarks/cli_overhead.py`), and a candidate job waiting about a second for its worker's
CUDA context. A server started once per workspace has done all of that before the command
arrives: it imported torch and every command module, and its standbys (harness.targets.standby)
were started when the previous job ended, so each has its CUDA context by the next command.

The client side is `relay(argv)`, called by the `kopt` console script before anything heavy
is imported: when a server answers on this workspace's socket and shares this process's
identity (`identity()`: kopt's source files, the interpreter and the environment variables
that decide how a command runs), the command runs there, in this process's working
directory, and its stdout, stderr and exit code come back unchanged (the JSON last line
included). Otherwise -- no server, another environment or kopt version, a server busy with
another command, `KOPT_SERVE=0` -- it returns None and the command runs here as it always
has. A served command's output is plain text (no colours or live lines: the server's
streams are not a terminal).

What a server will not do: run anything but `SERVED` commands, take a connection from
another user or from another mount namespace (a sandboxed candidate shares the user but not
the mounts), or outlive `idle_s` without a command. Candidate code still runs only in the
sandboxed worker jobs the verifier starts; the server holds no candidate code itself.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import queue
import socket
import struct
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

SERVED = frozenset({"verify", "bench"})
"""Commands a server runs: short ones, whose start-up is a large part of their time."""

ENV_SWITCH = "KOPT_SERVE"
"""`KOPT_SERVE=0` runs every command in its own process, server or not."""

IDLE_S = 1800.0
"""A server with no command for this long ends (its standbys with it)."""

REPLY_WAIT_S = 2.0
"""How long a client waits for a server's answer before running the command itself."""

ENV_PREFIXES = ("KOPT_", "TRITON_", "CUDA_", "TORCH", "PYTORCH_", "NVIDIA_", "OMP_", "MKL_",
                "LD_", "PYTHON", "CC", "CXX")
ENV_NAMES = ("PATH", "HOME", "TMPDIR", "VIRTUAL_ENV", "CONDA_PREFIX")
"""The environment a served command must share with its client: kopt's and its libraries'
settings, the compilers and the search paths."""

SOURCE_DIRS = ("kopt", "harness", "phases", "workbench")

ENV_DEPTH = "KOPT_WORKER_STANDBY"
STANDBYS = "2"
"""Standby workers a served command's jobs keep waiting, unless the server's environment sets
`KOPT_WORKER_STANDBY`: a verification takes a candidate and a reference job at once."""


def socket_path(workspace: Path) -> Path:
    """This workspace's socket: under the temporary folder (a socket's path is limited to
    about 100 bytes, a workspace's is not), in a folder only this user can open."""
    digest = hashlib.sha1(str(workspace).encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"kopt-{os.getuid()}" / f"serve-{digest}.sock"


def _source_stamp() -> str:
    """kopt's Python files, by name, size and modification time: a server started before an
    edit or an upgrade does not serve the new code's clients."""
    from kopt.harness.paths import PACKAGE_ROOT

    h = hashlib.sha1()
    for name in SOURCE_DIRS:
        top = PACKAGE_ROOT / name
        for path in sorted(top.rglob("*.py")) if top.is_dir() else []:
            try:
                st = path.stat()
            except OSError:
                continue
            h.update(f"{path.relative_to(PACKAGE_ROOT)}:{st.st_size}:{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def identity(environ: dict[str, str] | None = None) -> dict[str, Any]:
    """What a client and the server that runs its command must share."""
    env = dict(os.environ if environ is None else environ)
    return {"python": sys.executable, "source": _source_stamp(),
            "env": {k: v for k, v in sorted(env.items())
                    if k.startswith(ENV_PREFIXES) or k in ENV_NAMES}}


def _send(conn: socket.socket, obj: dict[str, Any]) -> None:
    conn.sendall((json.dumps(obj) + "\n").encode())


def _lines(conn: socket.socket) -> Iterator[dict[str, Any]]:
    """The JSON objects a peer sends, one per line, until it closes."""
    buf = b""
    while True:
        chunk = conn.recv(65536)
        if not chunk:
            return
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            yield json.loads(line)


def _private(path: Path) -> bool:
    """Whether `path` and its folder are this user's and no one else's: a client must not
    print the verdicts of a server someone else put where this workspace's would be."""
    try:
        folder, sock = path.parent.stat(), path.stat()
    except OSError:
        return False
    mine = os.getuid()
    return folder.st_uid == mine == sock.st_uid and not folder.st_mode & 0o077


def _connect(path: Path, timeout: float) -> socket.socket | None:
    if not _private(path):
        return None
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.settimeout(timeout)
    try:
        conn.connect(str(path))
    except OSError:
        conn.close()
        return None
    return conn


# -- the client ---------------------------------------------------------------------------------

def relay(argv: list[str]) -> int | None:
    """Run `argv` in this workspace's server; its exit code, or None when it was not run
    there (the caller runs it itself)."""
    try:
        return _relay(argv)
    except KeyboardInterrupt:  # before the server answered: nothing ran
        print("kopt: interrupted", file=sys.stderr)
        return 130


def _relay(argv: list[str]) -> int | None:
    if not argv or argv[0] not in SERVED or any(a in ("-h", "--help") for a in argv):
        return None
    if os.environ.get(ENV_SWITCH, "1").strip().lower() in ("0", "false", "no", "off"):
        return None
    from kopt.harness.paths import workspace_root

    conn = _connect(socket_path(workspace_root()), REPLY_WAIT_S)
    if conn is None:
        return None
    with conn:
        try:
            import shutil

            _send(conn, {"argv": argv, "cwd": os.getcwd(), "identity": identity(),
                         "columns": shutil.get_terminal_size().columns})
            lines = _lines(conn)
            answer = next(lines, None)
        except (OSError, ValueError):
            return None
        if not answer or not answer.get("accept"):
            return None  # busy, another identity: this process runs it
        conn.settimeout(None)
        try:
            for frame in lines:
                if "out" in frame:
                    sys.stdout.write(frame["out"])
                    sys.stdout.flush()
                elif "err" in frame:
                    sys.stderr.write(frame["err"])
                    sys.stderr.flush()
                elif "exit" in frame:
                    return int(frame["exit"])
        except KeyboardInterrupt:  # closing the connection interrupts the served command
            print("kopt: interrupted", file=sys.stderr)
            return 130
        except (OSError, ValueError):
            pass
    print("kopt: error: the kopt server ended in the middle of the command (run it again; "
          "KOPT_SERVE=0 runs it without the server)", file=sys.stderr)
    return 1


def ask(workspace: Path, request: dict[str, Any]) -> dict[str, Any] | None:
    """One question to this workspace's server (`status`, `stop`); None when none answers."""
    conn = _connect(socket_path(workspace), REPLY_WAIT_S)
    if conn is None:
        return None
    with conn:
        try:
            _send(conn, request)
            return next(_lines(conn), None)
        except (OSError, ValueError):
            return None


# -- the server ---------------------------------------------------------------------------------

class _Frames(io.TextIOBase):
    """A served command's stdout or stderr: each write goes to the client as one frame."""

    def __init__(self, conn: socket.socket, key: str, lock: threading.Lock) -> None:
        self.conn, self.key, self.lock = conn, key, lock
        self.broken = False

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return False

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return "utf-8"

    def write(self, text: str) -> int:
        if text and not self.broken:
            try:
                with self.lock:
                    _send(self.conn, {self.key: text})
            except OSError:
                self.broken = True  # the client is gone: the command finishes unheard
        return len(text)


def _peer_allowed(conn: socket.socket) -> str | None:
    """Why a connection is refused (another user, another mount namespace), or None."""
    if not hasattr(socket, "SO_PEERCRED"):
        return None
    pid, uid, _gid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                         struct.calcsize("3i")))
    if uid != os.getuid():
        return "another user"
    try:
        if os.readlink(f"/proc/{pid}/ns/mnt") != os.readlink("/proc/self/ns/mnt"):
            return "another mount namespace (a sandboxed process)"
    except OSError:
        pass  # no /proc: the user check stands alone
    return None


class Server:
    """One workspace's server: an acceptor thread answers every connection at once (busy,
    refused, status, stop) and hands accepted commands to the main thread, which runs them
    one at a time."""

    def __init__(self, workspace: Path, *, idle_s: float = IDLE_S,
                 log: Callable[[str], None] = print) -> None:
        self.workspace = workspace
        self.path = socket_path(workspace)
        self.idle_s = idle_s
        self.log = log
        self.identity = identity()
        self.env = {ENV_DEPTH: STANDBYS, **os.environ}
        """A command's environment: the server's own, `STANDBYS` waiting unless it says
        otherwise (the client's identity is checked against the server's own)."""
        self.commands: queue.Queue[tuple[socket.socket, dict[str, Any]] | None] = queue.Queue()
        self.busy = threading.Event()
        self.served = 0
        self.started = time.time()
        self.sock: socket.socket | None = None

    def bind(self) -> None:
        from kopt.harness.errors import BadInputError

        folder = self.path.parent
        folder.mkdir(mode=0o700, exist_ok=True)
        st = folder.stat()
        if st.st_uid != os.getuid() or st.st_mode & 0o077:
            raise BadInputError(f"{folder} is not private to this user",
                                fix="remove it, or set TMPDIR to a folder of your own")
        answer = ask(self.workspace, {"status": True})
        if answer is not None:
            raise BadInputError(f"a kopt server already serves {self.workspace} (pid "
                                f"{answer.get('pid')})", fix="`kopt serve --stop` ends it")
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()  # a server that died without removing its socket
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(str(self.path))
        os.chmod(self.path, 0o600)
        self.sock.listen(8)

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()

    def _accept(self) -> None:
        assert self.sock is not None
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return  # closed: the server is ending
            try:
                conn.settimeout(REPLY_WAIT_S)
                request = next(_lines(conn), None) or {}
                why = _peer_allowed(conn)
                if why is not None:
                    _send(conn, {"accept": False, "why": why})
                elif request.get("status"):
                    _send(conn, self.status())
                elif request.get("stop"):
                    _send(conn, {"stopping": True, "pid": os.getpid()})
                    self.commands.put(None)
                elif self.busy.is_set():
                    _send(conn, {"accept": False, "why": "busy with another command"})
                elif request.get("identity") != self.identity:
                    _send(conn, {"accept": False, "why": "another kopt source, Python or environment"})
                    self.log(f"refused {' '.join(request.get('argv') or [])}: another kopt "
                             "source, Python or environment than this server's")
                elif (request.get("argv") or [""])[0] not in SERVED:
                    _send(conn, {"accept": False, "why": "not a served command"})
                else:
                    self.busy.set()
                    _send(conn, {"accept": True})
                    self.commands.put((conn, request))
                    continue  # the main thread owns it now
            except (OSError, ValueError):
                pass
            conn.close()

    def status(self) -> dict[str, Any]:
        return {"pid": os.getpid(), "workspace": str(self.workspace), "served": self.served,
                "busy": self.busy.is_set(), "up_s": round(time.time() - self.started, 1),
                "idle_s": self.idle_s}

    def run(self, execute: Callable[[list[str]], int]) -> None:
        """Serve until stopped or idle for `idle_s`; `execute(argv)` runs one command."""
        threading.Thread(target=self._accept, name="kopt-serve-accept", daemon=True).start()
        while True:
            try:
                item = self.commands.get(timeout=self.idle_s)
            except queue.Empty:
                self.log(f"no command for {self.idle_s:g} s: ending")
                return
            if item is None:
                self.log("stopped by `kopt serve --stop`")
                return
            conn, request = item
            try:
                self._serve_one(conn, request, execute)
            finally:
                conn.close()
                self.busy.clear()

    def _serve_one(self, conn: socket.socket, request: dict[str, Any],
                   execute: Callable[[list[str]], int]) -> None:
        argv = [str(a) for a in request["argv"]]
        lock = threading.Lock()
        out, err = _Frames(conn, "out", lock), _Frames(conn, "err", lock)
        done = threading.Event()
        gone = threading.Event()

        def watch() -> None:  # the client closed early (Ctrl-C): interrupt the command
            conn.settimeout(None)
            with contextlib.suppress(OSError):
                while conn.recv(1024):
                    pass
            if not done.is_set():
                gone.set()
                import _thread

                _thread.interrupt_main()

        t0 = time.monotonic()
        code = 1
        os.environ.clear()  # what an earlier command set is not this one's
        os.environ.update(self.env)
        here = os.getcwd()
        threading.Thread(target=watch, name="kopt-serve-watch", daemon=True).start()
        try:
            os.chdir(request.get("cwd") or here)
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), \
                    _width(request.get("columns")):  # type: ignore[type-var]
                try:
                    code = execute(argv)
                except SystemExit as stop:  # argparse's usage errors
                    code = stop.code if isinstance(stop.code, int) else 2
                except KeyboardInterrupt:
                    code = 130
                except Exception:  # noqa: BLE001 - the command's crash is its client's to see
                    import traceback

                    traceback.print_exc()
                    code = 1
            done.set()
            if not gone.is_set():
                with lock:
                    _send(conn, {"exit": code})
        except KeyboardInterrupt:  # the client left just as the command ended
            code = 130
        except OSError:
            pass
        finally:
            done.set()
            os.chdir(here)
        self.served += 1
        how = "client gone" if gone.is_set() else f"exit {code}"
        self.log(f"{' '.join(argv)}: {how} in {time.monotonic() - t0:.1f} s")


@contextlib.contextmanager
def _width(columns: Any) -> Iterator[None]:
    """kopt's consoles at the client's terminal width (not an environment variable: a job's
    environment must stay the one its waiting worker was started with)."""
    from kopt.workbench.output import console, err_console

    saved = [(c, c._width) for c in (console, err_console)]
    try:
        if isinstance(columns, int) and columns > 0:
            for c, _ in saved:
                c.width = columns
        yield
    finally:
        for c, width in saved:
            c._width = width


def warm_up(device: str) -> None:
    """What the first served command would otherwise do itself: start the standbys its jobs
    take (the caller imports the command modules, torch with them)."""
    from kopt.harness.paths import kopt_dir
    from kopt.harness.targets.local import ISOLATED
    from kopt.workbench import early_workers

    kopt_dir().mkdir(parents=True, exist_ok=True)  # a used workspace: its jobs' standbys start early
    ISOLATED.keep(2)
    os.environ.setdefault(ENV_DEPTH, STANDBYS)
    early_workers.start(["verify", "--device", device])
