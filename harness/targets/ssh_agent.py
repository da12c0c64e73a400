"""The remote side of the `ssh://` target: a small stdlib-only agent that runs under the remote
host's python (shipped inline with `python3 -c`, so nothing is installed there).

It keeps the remote workspace (`blobs/`, `src/`, `jobs/`, see harness/targets/ssh.py), receives
files, starts a job under a detached supervisor that enforces its timeout on the worker's
process group (inside the remote host's sandbox unless the job was started with it off),
follows a job's log from a byte offset, and prunes what has not been used for 3 days.
`AGENT` is its source; `BOOTSTRAP` the `python3 -c` program that runs it.
"""

from __future__ import annotations

import base64

AGENT = r'''
import json, os, signal, subprocess, sys, tarfile, time, io, shutil, platform

ACTION, WS = sys.argv[1], os.path.expanduser(sys.argv[2])


def job_path(rel):
    path = os.path.normpath(os.path.join(WS, rel))
    if not path.startswith(os.path.join(WS, "jobs") + os.sep):
        sys.exit("bad job path %r" % rel)
    return path


def alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def read_json(path, default=None):
    try:
        with open(path) as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return default


def write_json(path, data):
    with open(path + ".tmp", "w") as handle:
        json.dump(data, handle)
    os.replace(path + ".tmp", path)


def probe(args):
    info = {"host": platform.node(), "python": sys.version.split()[0],
            "python_path": sys.executable, "workspace": WS}
    os.makedirs(WS, exist_ok=True)
    usage = shutil.disk_usage(WS)
    info["disk_free_bytes"] = usage.free
    try:
        import torch
        info["torch"] = torch.__version__
        info["torch_cuda"] = torch.version.cuda
        if torch.cuda.is_available():
            props = torch.cuda.get_device_properties(0)
            info["gpu"] = {"name": props.name, "count": torch.cuda.device_count(),
                           "memory_gib": round(props.total_memory / 2**30, 1),
                           "capability": "%d.%d" % (props.major, props.minor)}
        else:
            info["gpu"] = None
    except Exception as err:
        info["torch"] = None
        info["torch_error"] = "%s: %s" % (type(err).__name__, err)
        info["gpu"] = None
    try:
        import triton
        info["triton"] = triton.__version__
    except Exception as err:
        info["triton"] = None
        info["triton_error"] = "%s: %s" % (type(err).__name__, err)
    try:
        import kopt
        info["kopt_installed"] = os.path.dirname(os.path.dirname(kopt.__file__))
    except Exception:
        info["kopt_installed"] = None
    print(json.dumps(info))


def missing(args):
    blobs = os.path.join(WS, "blobs")
    gone = [s for s in args["blobs"] if not os.path.exists(os.path.join(blobs, s))]
    trees = [t for t in args["trees"] if not os.path.exists(os.path.join(WS, t, ".complete"))]
    print(json.dumps({"blobs": gone, "trees": trees}))


def receive(_):
    blobs = os.path.join(WS, "blobs")
    os.makedirs(blobs, exist_ok=True)
    layout = {}
    with tarfile.open(fileobj=sys.stdin.buffer, mode="r|*") as tar:
        for member in tar:
            data = tar.extractfile(member)
            if data is None:
                continue
            if member.name == "trees.json":
                layout = json.loads(data.read())
                continue
            sha = os.path.basename(member.name)
            tmp = os.path.join(blobs, ".%s.%d" % (sha, os.getpid()))
            with open(tmp, "wb") as out:
                shutil.copyfileobj(data, out)
            os.replace(tmp, os.path.join(blobs, sha))
    for tree, files in layout.items():
        root = os.path.join(WS, tree)
        for rel, (sha, mode) in files.items():
            dest = os.path.join(root, rel)
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            if os.path.exists(dest):
                os.unlink(dest)
            # a copy, never a hard link: a job that edits its own files (a cheating candidate
            # rewriting case/model.py) must not change the blob other jobs are built from
            shutil.copyfile(os.path.join(blobs, sha), dest)
            os.utime(os.path.join(blobs, sha))  # last use, for prune()
            if mode & 0o111:
                os.chmod(dest, 0o755)
        open(os.path.join(root, ".complete"), "w").close()


def prune(keep_days=3.0):
    """Finished job directories and blobs unused for `keep_days`."""
    now = time.time()
    jobs = os.path.join(WS, "jobs")
    for name in os.listdir(jobs) if os.path.isdir(jobs) else []:
        status = os.path.join(jobs, name, "status.json")
        try:
            if now - os.path.getmtime(status) > keep_days * 86400:
                shutil.rmtree(os.path.join(jobs, name), ignore_errors=True)
        except OSError:
            continue
    blobs = os.path.join(WS, "blobs")
    for name in os.listdir(blobs) if os.path.isdir(blobs) else []:
        path = os.path.join(blobs, name)
        try:
            if now - os.path.getmtime(path) > keep_days * 86400:
                os.unlink(path)
        except OSError:
            continue


def start(args):
    prune()
    job = job_path(args["job"])
    os.makedirs(os.path.join(job, "out"), exist_ok=True)
    write_json(os.path.join(job, "launch.json"), args)
    open(os.path.join(job, "worker.log"), "ab").close()
    boot = "import base64,sys;BLOB=%r;exec(base64.b64decode(BLOB).decode())" % BLOB
    sup = subprocess.Popen([sys.executable, "-c", boot, "supervise", WS],
                           stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                           stderr=open(os.path.join(job, "supervisor.log"), "ab"),
                           start_new_session=True, close_fds=True)
    sup.stdin.write(json.dumps({"job": args["job"]}).encode())
    sup.stdin.close()
    with open(os.path.join(job, "supervisor.pid"), "w") as handle:
        handle.write(str(sup.pid))
    print(json.dumps({"pid": sup.pid}))


def isolated(python, job, env):
    """The verifier's reference worker in a clean interpreter, as the local target starts it:
    `-I -S` (no PYTHON* variables, user site-packages or .pth files), the folders the python
    imports from put on sys.path by hand; None when they cannot be read."""
    try:
        probe = subprocess.run([python, "-c", "import json, sys; print(json.dumps(sys.path))"],
                               cwd=job, env=env, capture_output=True, text=True, timeout=60)
        paths = [p for p in json.loads(probe.stdout.strip().splitlines()[-1])
                 if p and p != job and os.path.isdir(p)]
    except (OSError, ValueError, IndexError, subprocess.SubprocessError):
        return None
    boot = ("import sys; sys.path[:0] = %r; "
            "from kopt.harness.worker import main; raise SystemExit(main())" % (paths,))
    return [python, "-I", "-S", "-c", boot, job]


def supervise(args):
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    job = job_path(args["job"])
    launch = read_json(os.path.join(job, "launch.json"))
    env = dict(os.environ)
    env["KOPT_CACHE"] = os.path.join(WS, "cache")  # tensors and GPU ceilings, shared by jobs
    if launch["src"]:
        src = os.path.join(WS, launch["src"])
        env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH", "")) if p)
    env.update({k: str(v) for k, v in launch["env"].items()})
    env["PYTHONUNBUFFERED"] = "1"
    log = open(os.path.join(job, "worker.log"), "ab")
    began = time.time()
    command = [launch["python"], "-m", "kopt.harness.worker", job]
    if read_json(os.path.join(job, "request.json")).get("job") == "reference":
        command = isolated(launch["python"], job, env) or command
    if launch.get("sandbox"):
        # harness/sandbox.py on this host wraps the worker (bwrap when it can) and execs it,
        # keeping the pid: the group kill below still takes everything down
        command = [launch["python"], "-m", "kopt.harness.sandbox", "exec", job, "--"] + command
    proc = subprocess.Popen(command, cwd=job, env=env,
                            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    with open(os.path.join(job, "worker.pid"), "w") as handle:
        handle.write(str(proc.pid))
    cancelled = []

    def on_term(signum, frame):
        cancelled.append(True)
        kill_group(proc.pid)

    signal.signal(signal.SIGTERM, on_term)
    timed_out = False
    try:
        proc.wait(timeout=float(launch["timeout"]))
    except subprocess.TimeoutExpired:
        timed_out = True
    kill_group(proc.pid)
    proc.wait()
    log.close()
    write_json(os.path.join(job, "status.json"),
               {"returncode": None if timed_out else proc.returncode, "timed_out": timed_out,
                "cancelled": bool(cancelled), "elapsed_s": time.time() - began,
                "host": platform.node()})


def kill_group(pid):
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def state_of(job):
    status = read_json(os.path.join(job, "status.json"))
    if status is not None:
        state = "timed_out" if status.get("timed_out") else \
            "cancelled" if status.get("cancelled") else "done"
        return dict(status, state=state)
    try:
        pid = int(open(os.path.join(job, "supervisor.pid")).read())
    except (OSError, ValueError):
        return {"state": "lost"}
    return {"state": "running" if alive(pid) else "lost", "pid": pid}


def follow(args):
    job = job_path(args["job"])
    if not os.path.isdir(job):
        sys.exit(3)
    out = sys.stdout.buffer
    with open(os.path.join(job, "worker.log"), "rb") as log:
        log.seek(int(args.get("offset", 0)))
        while True:
            chunk = log.read(65536)
            if chunk:
                out.write(chunk)
                out.flush()
                continue
            state = state_of(job)["state"]
            if state != "running":
                rest = log.read()
                if rest:
                    out.write(rest)
                    out.flush()
                return
            time.sleep(0.05)


def status(args):
    job = job_path(args["job"])
    if not os.path.isdir(job):
        print(json.dumps({"state": "missing"}))
        return
    info = state_of(job)
    try:
        info["log_bytes"] = os.path.getsize(os.path.join(job, "worker.log"))
    except OSError:
        info["log_bytes"] = 0
    print(json.dumps(info))


def fetch(args):
    job = job_path(args["job"])
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz", compresslevel=1) as tar:
        if os.path.isdir(os.path.join(job, "out")):
            tar.add(os.path.join(job, "out"), arcname="out")
        if os.path.exists(os.path.join(job, "status.json")):
            tar.add(os.path.join(job, "status.json"), arcname="status.json")
    sys.stdout.buffer.write(buffer.getvalue())


def cancel(args):
    job = job_path(args["job"])
    info = state_of(job)
    if info["state"] != "running":
        print(json.dumps({"cancelled": False, "state": info["state"]}))
        return
    try:
        os.kill(info["pid"], signal.SIGTERM)
    except ProcessLookupError:
        pass
    for _ in range(100):
        if read_json(os.path.join(job, "status.json")) is not None:
            break
        time.sleep(0.05)
    else:
        try:
            kill_group(int(open(os.path.join(job, "worker.pid")).read()))
        except (OSError, ValueError):
            pass
    print(json.dumps({"cancelled": True}))


ACTIONS = {"probe": probe, "missing": missing, "receive": receive, "start": start,
           "supervise": supervise, "follow": follow, "status": status, "fetch": fetch,
           "cancel": cancel}
try:
    if ACTION == "receive":
        receive(None)
    else:
        raw = sys.stdin.read()
        ACTIONS[ACTION](json.loads(raw) if raw.strip() else {})
except OSError as err:
    if err.errno == 28:
        sys.stderr.write("No space left on device: %s\n" % err)
        sys.exit(28)
    raise
'''

BLOB = base64.b64encode(AGENT.encode()).decode()
# The agent re-launches itself as the supervisor, so it is handed its own encoded source.
BOOTSTRAP = (f"import base64,sys;BLOB={BLOB!r};"
              "exec(base64.b64decode(BLOB).decode())")
