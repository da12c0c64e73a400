"""What the `ssh://` target pushes and reads back (harness/targets/ssh.py): content hashes and
manifests of kopt's source tree and of job directories, the cached probe of a host, the
multiplexing socket's folder, and tar extraction that never writes outside its destination."""

from __future__ import annotations

import getpass
import hashlib
import json
import os
import tarfile
import tempfile
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kopt.harness.errors import BadInputError
from kopt.harness.targets.base import LineSink


@dataclass(frozen=True)
class Entry:
    path: Path
    sha: str
    size: int
    mode: int


class LineAssembler:
    """Bytes in, whole lines out (to `on_line` and the tail), across reconnects."""

    def __init__(self, tail: deque[str], on_line: LineSink | None) -> None:
        self.tail, self.on_line = tail, on_line
        self.pending = b""
        self.bytes_seen = 0

    def feed(self, chunk: bytes) -> None:
        self.bytes_seen += len(chunk)
        self.pending += chunk
        *lines, self.pending = self.pending.split(b"\n")
        for line in lines:
            self._emit(line)

    def flush(self) -> None:
        if self.pending:
            self._emit(self.pending)
            self.pending = b""

    def _emit(self, raw: bytes) -> None:
        line = raw.decode(errors="replace").rstrip("\r")
        self.tail.append(line)
        if self.on_line is not None:
            self.on_line(line)


def read_request(job_dir: Path) -> dict[str, Any]:
    try:
        return json.loads((job_dir / "request.json").read_text())
    except (OSError, ValueError) as err:
        raise BadInputError(f"{job_dir} is not a job directory (no readable request.json)",
                            fix="stage it with harness.job.stage_job") from err


def file_sha(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def tree_manifest(root: Path, *, skip_top: Iterable[str] = (),
              skip_names: tuple[str, ...] = ("__pycache__",)) -> dict[str, Entry]:
    skip_top = set(skip_top)
    entries: dict[str, Entry] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = Path(dirpath).relative_to(root)
        dirnames[:] = sorted(d for d in dirnames if d not in skip_names
                             and not (rel_dir == Path(".") and d in skip_top))
        for name in sorted(filenames):
            if name.endswith(".pyc") or (rel_dir == Path(".") and name in skip_top):
                continue
            path = Path(dirpath) / name
            if not path.is_file():
                continue
            st = path.stat()
            entries[(rel_dir / name).as_posix()] = Entry(path, file_sha(path), st.st_size,
                                                          st.st_mode & 0o777)
    return entries


_SOURCE_CACHE: dict[tuple[Any, ...], dict[str, Entry]] = {}


def source_manifest() -> dict[str, Entry]:
    """What the remote worker imports (`kopt/__init__.py` and the `harness` package beside it,
    as in a source checkout), keyed by path under src/<hash>/."""
    import kopt
    from kopt.harness.paths import PACKAGE_ROOT

    root = PACKAGE_ROOT / "harness"
    init = Path(kopt.__file__).resolve()
    files = [init, *root.rglob("*.py")]
    stamp = tuple(sorted((str(p), p.stat().st_mtime_ns) for p in files))
    if stamp not in _SOURCE_CACHE:
        _SOURCE_CACHE.clear()
        tree = {f"harness/{rel}": e for rel, e in tree_manifest(root).items()}
        st = init.stat()
        tree["kopt/__init__.py"] = Entry(init, file_sha(init), st.st_size, st.st_mode & 0o777)
        _SOURCE_CACHE[stamp] = tree
    return _SOURCE_CACHE[stamp]


def tree_hash(tree: dict[str, Entry]) -> str:
    digest = hashlib.sha256()
    for rel in sorted(tree):
        digest.update(f"{rel}\0{tree[rel].sha}\0{tree[rel].mode}\n".encode())
    return digest.hexdigest()[:20]


def probe_cache_file(spec: str) -> Path:
    from kopt.harness.paths import cache_dir

    return cache_dir() / "targets" / (hashlib.sha256(spec.encode()).hexdigest()[:16] + ".json")


def read_fresh(file: Path, max_age_s: float) -> dict[str, Any] | None:
    try:
        if time.time() - file.stat().st_mtime > max_age_s:
            return None
        data = json.loads(file.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def control_dir() -> str:
    """Short (unix socket paths are limited to ~100 bytes) and private."""
    directory = Path(tempfile.gettempdir()) / f"kopt-ssh-{getpass.getuser()}"
    directory.mkdir(mode=0o700, exist_ok=True)
    return str(directory)


def safe_extract(tar: tarfile.TarFile, member: tarfile.TarInfo, dest: Path) -> None:
    target = (dest / member.name).resolve()
    if not str(target).startswith(str(dest.resolve()) + os.sep) or not (member.isfile() or
                                                                       member.isdir()):
        return  # never let the remote write outside the job directory
    if member.isdir():
        target.mkdir(parents=True, exist_ok=True)
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    source = tar.extractfile(member)
    if source is not None:
        target.write_bytes(source.read())


def first_line(text: str, marker: str | None = None, *, last: bool = False) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("Warning:")]
    if marker:
        lines = [ln for ln in lines if marker in ln.lower()] or lines
    if not lines:
        return ""
    return (lines[-1] if last else lines[0])[:200]
