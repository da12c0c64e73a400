"""The sandbox a worker process runs in: candidate code cannot touch the user's machine.

A candidate is arbitrary Python, often written by a model, and every worker job imports one
or runs the case's model. On Linux each worker is started inside bubblewrap (`bwrap`, the
sandbox Flatpak and coding agents use; Debian/Ubuntu package `bubblewrap`) with:

- **network**: a fresh network namespace with only a loopback of its own; nothing on the
  machine's loopback or beyond is reachable;
- **filesystem**: an empty root with the system (`/usr`, `/etc` minus its secrets, `/opt`,
  `/sys`) and the Python environment read-only, the kopt package source read-only, the job
  directory, a private `/tmp` and the compile caches (Triton, Inductor, CUDA, kopt's tensor
  cache) writable, a suite's GPU gate folder (`harness.gpu_gate`) read-only; the user's
  home, the workspace and everything else do not exist;
- **processes**: a PID namespace (only the worker and its children are visible, so no
  `/proc/<kopt pid>/environ`), no capabilities, no nested user namespaces; the sandbox dies
  with the kopt process that started it;
- **GPU**: `/dev/nvidia*` passed through.

Where bubblewrap is missing or cannot create namespaces, `unshare` (util-linux) gives the
network and PID layers without the filesystem one; where neither works the worker runs as
before. Nothing here raises: `probe()` says what is enforced and, for each missing layer,
why and the fix (`kopt doctor` prints it).

`KOPT_SANDBOX=0` (or `--no-sandbox` on the commands that run candidates) turns it off;
`KOPT_SANDBOX_PATHS=/a:/b` adds read-only paths (an editable install outside the
environment). A wrapper only prefixes the worker's command and adjusts its environment:
stdin, stdout and inherited file descriptors reach the worker unchanged.

`python -m kopt.harness.sandbox exec JOB_DIR -- CMD...` wraps CMD on the machine it runs on
(the ssh target's remote supervisor uses it); `python -m kopt.harness.sandbox` prints the
state as JSON.
"""

from __future__ import annotations

import getpass
import glob
import json
import os
import shutil
import site
import subprocess
import sys
import tempfile
import threading
from dataclasses import asdict, dataclass
from pathlib import Path

from kopt.harness import gpu_gate

ENV_SWITCH = "KOPT_SANDBOX"
EXTRA_PATHS_ENV = "KOPT_SANDBOX_PATHS"
ACTIVE_ENV = "KOPT_SANDBOXED"
"""Set inside the sandbox to the mechanism's name (the worker reports it)."""
PARENT_ENV = "KOPT_WORKER_PARENT"
"""harness.worker's death-signal variable (duplicated here: this module imports nothing of
kopt, so that a remote supervisor can run it before anything else is importable)."""

PROBE_TIMEOUT_S = 10
SECRET_ETC = ("/etc/shadow", "/etc/gshadow", "/etc/shadow-", "/etc/gshadow-", "/etc/ssh",
              "/etc/sudoers", "/etc/sudoers.d", "/etc/security/opasswd")
"""Under the read-only /etc, hidden (an empty file or directory in their place)."""
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt",
               "/sys")
# bwrap options tried in order: the first set that runs `true` is used. --disable-userns
# (bwrap >= 0.8) stops a candidate from making a nested user namespace to regain capabilities.
_HARDENING = (["--unshare-user", "--disable-userns", "--cap-drop", "ALL"],
              ["--cap-drop", "ALL"], [])


def enabled(env: dict[str, str] | None = None) -> bool:
    """False when `KOPT_SANDBOX` says off (0/false/no/off)."""
    value = (env if env is not None else os.environ).get(ENV_SWITCH, "1")
    return value.strip().lower() not in ("0", "false", "no", "off")


@dataclass(frozen=True)
class Layer:
    """One protection and whether this machine enforces it."""

    name: str
    """`network`, `filesystem`, `processes`, `gpu`."""
    enforced: bool
    detail: str
    """How it is enforced, or why not."""
    fix: str = ""
    """What to do so that it is (empty when enforced)."""


@dataclass(frozen=True)
class SandboxState:
    """What wrapping a worker gives on this machine."""

    mechanism: str
    """`bwrap`, `unshare` or `none`."""
    layers: tuple[Layer, ...]
    reason: str = ""
    """Why the preferred mechanism (bwrap) is not used; empty when it is."""
    fix: str = ""
    bwrap_options: tuple[str, ...] = ()
    enabled: bool = True
    """False when switched off (`--no-sandbox`, KOPT_SANDBOX=0)."""

    @property
    def complete(self) -> bool:
        return self.enabled and all(layer.enforced for layer in self.layers)

    def summary(self) -> str:
        """One line: the mechanism and each layer, e.g. `bwrap: network, filesystem, ...`."""
        if not self.enabled:
            return "off (--no-sandbox or KOPT_SANDBOX=0): candidate code runs with your permissions"
        guards = [layer for layer in self.layers if layer.name != "gpu"]  # gpu: passed through
        on = [layer.name for layer in guards if layer.enforced]
        off = [layer.name for layer in guards if not layer.enforced]
        text = f"{self.mechanism}: {', '.join(on) or 'nothing'} enforced"
        if off:
            text += f"; NOT {', '.join(off)}"
        return text

    def to_dict(self) -> dict[str, object]:
        return {"enabled": self.enabled, "mechanism": self.mechanism, "reason": self.reason,
                "fix": self.fix, "layers": [asdict(layer) for layer in self.layers]}


# -- probing --------------------------------------------------------------------------------------

def _run_ok(argv: list[str]) -> tuple[bool, str]:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as err:
        return False, f"{type(err).__name__}: {err}"
    last = (done.stderr.strip().splitlines() or [""])[-1]
    return done.returncode == 0, last


def _userns_fix() -> str:
    """The sysctl that lets unprivileged users create user namespaces here."""
    def read(path: str) -> str | None:
        try:
            return Path(path).read_text().strip()
        except OSError:
            return None

    if read("/proc/sys/kernel/apparmor_restrict_unprivileged_userns") == "1":
        return ("AppArmor restricts user namespaces: sudo sysctl "
                "kernel.apparmor_restrict_unprivileged_userns=0 (or an AppArmor profile for bwrap)")
    if read("/proc/sys/kernel/unprivileged_userns_clone") == "0":
        return "user namespaces disabled: sudo sysctl kernel.unprivileged_userns_clone=1"
    if read("/proc/sys/user/max_user_namespaces") == "0":
        return "user namespaces disabled: sudo sysctl user.max_user_namespaces=15000"
    return ("allow user namespaces (sysctl kernel.unprivileged_userns_clone=1), or, in a "
            "container, run it with --security-opt seccomp=unconfined or make bwrap setuid")


_PROBED: SandboxState | None = None
_PROBE_LOCK = threading.Lock()


def probe(*, refresh: bool = False) -> SandboxState:
    """What this machine can enforce (probed once per process; a few ms)."""
    global _PROBED
    with _PROBE_LOCK:
        if _PROBED is None or refresh:
            _PROBED = _probe()
        state = _PROBED
    if not enabled():
        return SandboxState("none", state.layers, state.reason, state.fix, state.bwrap_options,
                            enabled=False)
    return state


def _probe() -> SandboxState:
    if not sys.platform.startswith("linux"):
        why = f"no sandbox on {sys.platform}: Linux namespaces only"
        return SandboxState("none", _layers_none(why, "run kopt on Linux for a sandbox"), why,
                            "run candidates on a Linux target")
    bwrap = shutil.which("bwrap")
    reason, fix = "", ""
    if bwrap is None:
        reason, fix = "bubblewrap is not installed", "install bubblewrap (apt-get install bubblewrap)"
    else:
        errors = []
        for options in _HARDENING:
            ok, err = _run_ok([bwrap, "--unshare-all", *options, "--die-with-parent",
                               "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev", "true"])
            if ok:
                return SandboxState("bwrap", _layers_bwrap(options), bwrap_options=tuple(options))
            errors.append(err)
        reason = f"bwrap cannot create namespaces here ({errors[-1] or errors[0]})"
        fix = _userns_fix()
    unshare = shutil.which("unshare")
    if unshare is not None:
        ok, err = _run_ok([unshare, *_unshare_options(), sys.executable, "-S", "-c", ""])
        if ok:
            return SandboxState("unshare", _layers_unshare(reason, fix), reason, fix)
        reason += f"; unshare failed too ({err})"
    return SandboxState("none", _layers_none(reason, fix), reason, fix)


def _gpu_nodes() -> list[str]:
    return sorted(glob.glob("/dev/nvidia*"))


def _gpu_layer(passed: bool) -> Layer:
    nodes = _gpu_nodes()
    if not nodes:
        return Layer("gpu", True, "no /dev/nvidia* on this machine (nothing to pass through)")
    how = "passed through" if passed else "visible (no device namespace)"
    return Layer("gpu", True, f"{len(nodes)} device node(s) {how}: {', '.join(nodes[:4])}"
                              + (" ..." if len(nodes) > 4 else ""))


def _layers_bwrap(options: list[str]) -> tuple[Layer, ...]:
    hardening = ("no capabilities, no nested user namespaces" if "--disable-userns" in options
                 else "no capabilities" if "--cap-drop" in options else "capabilities kept")
    return (
        Layer("network", True, "fresh network namespace: loopback of its own, nothing reachable"),
        Layer("filesystem", True, "read-only system and Python environment; writable: job "
                                  "directory, private /tmp, compile caches; home and workspace "
                                  "not mounted"),
        Layer("processes", True, f"PID namespace (no other process visible), {hardening}; "
                                 "dies with kopt"),
        _gpu_layer(True),
    )


def _layers_unshare(reason: str, fix: str) -> tuple[Layer, ...]:
    return (
        Layer("network", True, "fresh network namespace (unshare): loopback down, nothing reachable"),
        Layer("filesystem", False, f"not enforced: {reason}", fix),
        Layer("processes", True, "PID namespace (unshare): no other process visible"),
        _gpu_layer(False),
    )


def _layers_none(reason: str, fix: str) -> tuple[Layer, ...]:
    return tuple(Layer(name, False, f"not enforced: {reason}", fix)
                 for name in ("network", "filesystem", "processes")) + (_gpu_layer(False),)


def _unshare_options() -> list[str]:
    user = [] if os.geteuid() == 0 else ["--user", "--map-root-user"]
    return [*user, "--net", "--pid", "--fork", "--kill-child", "--mount", "--mount-proc"]


# -- what a worker sees ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Mounts:
    """The paths a worker's sandbox gives it besides its job directory, in mount order."""

    steps: tuple[tuple[str, str], ...] = ()
    """(`ro` | `rw` | `hide`, path): a read-only bind, a writable bind, or an empty tmpfs (or
    /dev/null for a file) hiding what a read-only bind above it showed."""

    def paths(self, kind: str) -> list[str]:
        return [p for k, p in self.steps if k == kind]


def _within(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def _python_paths(protect: list[Path]) -> list[Path]:
    """The Python environment: prefixes, site-packages and sys.path entries that are
    installation directories. An entry that is, or contains, a protected folder (the home,
    the workspace) is left out: binding it would show what it contains."""
    found: list[Path] = []
    candidates: list[str] = [sys.prefix, sys.base_prefix, sys.exec_prefix,
                             os.path.dirname(sys.executable)]
    try:
        candidates += site.getsitepackages()
    except AttributeError:
        pass
    candidates.append(site.getusersitepackages())
    # folders the user put on PYTHONPATH for kopt's own dependencies (carried wheels, say)
    candidates += [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    prefixes = [Path(p).resolve() for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)]
    for entry in sys.path:
        if not entry:
            continue
        p = Path(entry).resolve()
        if p.name in ("site-packages", "dist-packages") or p.suffix == ".zip" or any(
                _within(p, pre) for pre in prefixes):
            candidates.append(entry)
    for raw in candidates:
        for p in {Path(raw), Path(raw).resolve()}:
            if not p.is_absolute() or not p.exists():
                continue
            if any(_within(guard, p) for guard in protect):
                continue
            found.append(p)
    return found


def _kopt_source() -> list[Path]:
    """What `import kopt.harness` reads: the package folder(s) of this copy of kopt."""
    here = Path(__file__).resolve().parent  # .../harness
    root = here.parent
    paths = [here]
    if (root / "kopt" / "__init__.py").is_file():  # a source checkout: kopt/ beside harness/
        paths.append(root / "kopt")
    return paths


def _caches(env: dict[str, str]) -> list[Path]:
    """Compile caches and kopt's tensor cache, created if missing so that they can be bound."""
    home = Path(env.get("HOME") or os.path.expanduser("~"))
    triton_home = Path(env.get("TRITON_HOME") or home)
    user = env.get("USER") or _user()
    tmp = Path(tempfile.gettempdir())
    caches = [triton_home / ".triton",
              Path(env["TRITON_CACHE_DIR"]) if env.get("TRITON_CACHE_DIR") else None,
              Path(env.get("TORCHINDUCTOR_CACHE_DIR") or tmp / f"torchinductor_{user}"),
              Path(env["CUDA_CACHE_PATH"]) if env.get("CUDA_CACHE_PATH") else home / ".nv",
              *_kopt_caches(env)]
    gpu = bool(_gpu_nodes())
    out = []
    for i, c in enumerate(caches):
        if c is None:
            continue
        try:  # Triton, Inductor and kopt create theirs anyway; the CUDA cache only on a GPU
            if i != 3 or gpu:
                c.mkdir(parents=True, exist_ok=True)
        except OSError:
            continue
        if c.is_dir():
            out.append(c)
    return out


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return str(os.getuid())


def _kopt_caches(env: dict[str, str]) -> list[Path]:
    """kopt's tensor and ceilings cache (harness.paths.cache_dir()) as the worker will compute
    it from `env`, and as this process computes it: a measure job sets KOPT_CACHE, a
    verification does not, and a standby started for one then serves the other. Without
    KOPT_CACHE or KOPT_HOME the worker's cache is inside its job directory."""
    out = []
    for source in (env, os.environ):
        if source.get("KOPT_CACHE"):
            out.append(Path(source["KOPT_CACHE"]))
        if source.get("KOPT_HOME"):
            out.append(Path(source["KOPT_HOME"]) / ".kopt" / "cache")
    return out


def _protected(env: dict[str, str]) -> list[Path]:
    """Folders that must not be visible: the home and the workspace (the user's tree)."""
    out = [Path(env.get("HOME") or os.path.expanduser("~")).resolve()]
    workspace = Path(env.get("KOPT_HOME") or os.getcwd()).resolve()
    out.append(workspace)
    return [p for p in out if p != Path("/")]


def mounts(env: dict[str, str]) -> Mounts:
    """What a worker started with `env` sees: the system and the Python environment
    read-only, the caches writable, secrets in /etc and the user's folders hidden even where
    a system folder holds them (a home under /opt)."""
    protect = _protected(env)
    ro: list[str] = [d for d in SYSTEM_DIRS if os.path.isdir(d) and not os.path.islink(d)]
    ro += [str(p) for p in [*_python_paths(protect), *_kopt_source()]]
    ro += [str(Path(x).resolve()) for x in (env.get(EXTRA_PATHS_ENV) or "").split(os.pathsep)
           if x and os.path.exists(x)]
    ro += gpu_gate.visible_paths(env)
    rw = [str(c.resolve()) for c in _caches(env)]
    outer = _dedupe([p for p in ro if not any(_within(Path(p), g) for g in protect)])
    inner = _dedupe([p for p in ro if any(_within(Path(p), g) for g in protect)])
    steps = [("ro", p) for p in outer]
    steps += [("hide", p) for p in SECRET_ETC if os.path.lexists(p)]
    steps += [("hide", str(g)) for g in protect
              if any(_within(g, Path(p)) for p in outer) and g.exists()]
    steps += [("ro", p) for p in inner]
    steps += [("rw", p) for p in _dedupe(rw)]
    return Mounts(tuple(steps))


def _dedupe(paths: list[str]) -> list[str]:
    """Drop repeats and paths under an earlier one (already visible through it)."""
    out: list[str] = []
    for p in sorted(set(paths), key=lambda s: (s.count("/"), s)):
        if not any(_within(Path(p), Path(q)) for q in out):
            out.append(p)
    return out


def _symlinked_roots() -> list[tuple[str, str]]:
    """Merged-/usr systems: /bin -> usr/bin and friends, recreated as links."""
    links = []
    for d in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(d):
            links.append((os.readlink(d), d))
    return links


def _needs_own_bind(executable: str | None, shown: list[str]) -> bool:
    """Is `executable` a file outside every folder the sandbox already shows? (A path under
    one of them is visible as it is; binding over it fails when it is a symlink there, such
    as a virtual environment's `bin/python`.)"""
    if not executable or not os.path.isabs(executable) or not os.path.isfile(executable):
        return False
    path = Path(executable)
    return not any(_within(path, Path(p)) for p in shown)


def bwrap_args(state: SandboxState, env: dict[str, str], job_dir: str, *,
               executable: str | None = None) -> list[str]:
    """The `bwrap ...` prefix (up to and excluding the command) for a worker in `job_dir`;
    `executable`, the command's own program when it is a file the mounts may not show (an
    interpreter wrapper named with `ssh://...?python=PATH`), is shown read-only."""
    args = [shutil.which("bwrap") or "bwrap", "--unshare-all", *state.bwrap_options,
            "--die-with-parent"]
    for target, link in _symlinked_roots():
        args += ["--symlink", target, link]
    # /tmp first: a later tmpfs there would cover what is bound under it (a source tree or
    # a workspace in /tmp)
    args += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
    for g in _protected(env):
        if _within(g, Path("/tmp")):  # would be a writable folder of the private /tmp
            args += ["--perms", "0555", "--dir", str(g)]
    steps = mounts(env).steps
    for kind, p in steps:
        if kind == "ro":
            args += ["--ro-bind", p, p]
        elif kind == "hide":  # an empty folder nobody inside may write (no capabilities)
            args += (["--perms", "0555", "--tmpfs", p] if os.path.isdir(p)
                     else ["--ro-bind", "/dev/null", p])
    if _needs_own_bind(executable, [p for k, p in steps if k == "ro"]):
        args += ["--ro-bind", executable, executable]
    for node in _gpu_nodes():
        args += ["--dev-bind", node, node]
    for kind, p in steps:
        if kind == "rw":
            args += ["--bind", p, p]
    args += ["--bind", job_dir, job_dir, "--remount-ro", "/", "--chdir", job_dir]
    return args


def wrap(argv: list[str], env: dict[str, str], job_dir: str | Path, *,
         state: SandboxState | None = None) -> tuple[list[str], dict[str, str], str]:
    """`argv` and `env` for a worker in `job_dir`, inside the sandbox when it is on and
    available; and the mechanism used (`bwrap`, `unshare`, `none`, `off`). Never raises."""
    if not enabled(env):
        return argv, env, "off"
    state = state or probe()
    job_dir = str(Path(job_dir).resolve())
    env = dict(env)
    if state.mechanism == "bwrap":
        try:
            prefix = bwrap_args(state, env, job_dir, executable=argv[0] if argv else None)
        except OSError:
            return argv, env, "none"
        env["TMPDIR"] = "/tmp"
        env[ACTIVE_ENV] = "bwrap"
        if PARENT_ENV in env:
            # the worker's parent is now the sandbox's init (pid 1 of its PID namespace), which
            # bwrap --die-with-parent ties to the kopt process
            env[PARENT_ENV] = "1"
        return [*prefix, *argv], env, "bwrap"
    if state.mechanism == "unshare":
        env[ACTIVE_ENV] = "unshare"
        if PARENT_ENV in env:
            env[PARENT_ENV] = "0"  # the worker is pid 1 of its namespace: no parent there
        prefix = [shutil.which("unshare") or "unshare", *_unshare_options()]
        setpriv = shutil.which("setpriv")
        if setpriv:  # unshare has no death signal of its own: kill it with kopt
            prefix = [setpriv, "--pdeathsig", "KILL", "--", *prefix]
        return [*prefix, *argv], env, "unshare"
    return argv, env, "none"


def mounts_key(env: dict[str, str]) -> tuple[object, ...]:
    """What a sandbox started for `env` binds, besides the job directory (see `covers`)."""
    if not enabled(env):
        return ("off",)
    state = probe()
    if state.mechanism != "bwrap":
        return (state.mechanism,)
    return ("bwrap", frozenset(mounts(env).steps))


def covers(started: tuple[object, ...], needed: tuple[object, ...]) -> bool:
    """Whether a worker sandboxed with `started` sees everything a job needing `needed`
    does (same mechanism, a superset of the mounts): only then may a standby take the job."""
    if not started or not needed or started[0] != needed[0]:
        return False
    if len(needed) < 2:
        return True
    return len(started) >= 2 and needed[1] <= started[1]  # type: ignore[operator]


def warning_line(state: SandboxState | None = None) -> str | None:
    """The warning a command prints when candidates run without the full sandbox, or None."""
    state = state or probe()
    if not state.enabled:
        return ("kopt: warning: sandbox off (--no-sandbox / KOPT_SANDBOX=0): candidate code "
                "runs with your permissions (network, files, other processes)")
    if state.complete:
        return None
    missing = [layer for layer in state.layers if not layer.enforced]
    fix = next((layer.fix for layer in missing if layer.fix), state.fix)
    return (f"kopt: warning: sandbox incomplete, {', '.join(la.name for la in missing)} not "
            f"enforced: {state.reason or missing[0].detail}" + (f"; fix: {fix}" if fix else ""))


# -- checking it -----------------------------------------------------------------------------------

_SELF_TEST = r"""
import json, os, socket, sys
port, parent, outside = int(sys.argv[1]), sys.argv[2], sys.argv[3]
found = {}
s = socket.socket()
s.settimeout(2)
try:
    s.connect(("127.0.0.1", port))
    found["network"] = "connected to a port opened on 127.0.0.1 outside"
except OSError as err:
    found["network"] = None
try:
    with open(os.path.join(outside, "secret")) as handle:
        handle.read()
    found["filesystem"] = "read a file outside the job directory"
except OSError:
    try:
        open(os.path.join(outside, "written"), "w").close()
        found["filesystem"] = "wrote outside the job directory"
    except OSError:
        found["filesystem"] = None
found["processes"] = ("kopt's process is visible (/proc/%s/environ)" % parent
                      if os.path.exists("/proc/%s/environ" % parent) else None)
print(json.dumps(found))
"""


def self_test(timeout: float = 30.0) -> dict[str, str | None]:
    """Try each way out from inside a sandboxed `python -S` and report what got through:
    layer name -> None (blocked) or what the probe managed. Empty when the sandbox is off or
    the probe could not run."""
    import socket

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    outside = Path(tempfile.mkdtemp(prefix="kopt-sandbox-outside-"))
    job = Path(tempfile.mkdtemp(prefix="kopt-sandbox-job-"))
    try:
        (outside / "secret").write_text("not for candidates")
        env = {**os.environ, PARENT_ENV: str(os.getpid())}
        argv, env, how = wrap([sys.executable, "-S", "-c", _SELF_TEST,
                               str(listener.getsockname()[1]), str(os.getpid()), str(outside)],
                              env, job)
        if how in ("off",):
            return {}
        done = subprocess.run(argv, env=env, cwd=job, capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL)
        lines = done.stdout.strip().splitlines()
        return json.loads(lines[-1]) if done.returncode == 0 and lines else {}
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return {}
    finally:
        listener.close()
        shutil.rmtree(outside, ignore_errors=True)
        shutil.rmtree(job, ignore_errors=True)


# -- the remote launcher ---------------------------------------------------------------------------

def _exec_main(argv: list[str]) -> int:
    """`exec JOB_DIR -- CMD...`: replace this process by CMD inside the sandbox (same pid, so
    the caller's process-group kill still reaches it)."""
    if len(argv) < 3 or argv[1] != "--":
        print("usage: python -m kopt.harness.sandbox exec JOB_DIR -- CMD...", file=sys.stderr)
        return 2
    job_dir, cmd = argv[0], argv[2:]
    env = dict(os.environ)
    wrapped, env, how = wrap(cmd, env, job_dir)
    line = warning_line()
    if line and how != "off":
        print(line.replace("kopt: warning:", "kopt: warning (worker host):"), flush=True)
    os.execvpe(wrapped[0], wrapped, env)
    return 127  # not reached


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["exec"]:
        return _exec_main(argv[1:])
    print(json.dumps(probe().to_dict()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
