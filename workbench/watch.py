"""The kernel watcher: notices when a kernel file in a run's worktree is saved.

It watches the worktree *directory* (not the file), because editors save atomically: they
write a temporary file and rename it over the kernel, which replaces the file's inode. Raw
filesystem events are debounced by watchfiles, then collapsed to the set of kernel files
(`kernels/*.py`) whose content actually changed; `on_change` is called once per burst of
saves, from the watcher's own thread. It knows nothing of the UI.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Iterable
from pathlib import Path

import watchfiles

KERNELS_DIR = "kernels"

# 300 ms: long enough to merge an editor's write+rename+chmod burst into one change,
# short enough that the re-verify starts before the user looks back at the screen.
DEBOUNCE_MS = 300


def quiet_ms(debounce_ms: int) -> int:
    """How long the folder must stay quiet before a burst of saves is reported.

    A third of the debounce window (at least 50 ms): a fixed 50 ms split one burst in two
    whenever a loaded machine (or a slow editor plugin) spaced two writes further apart.
    """
    return max(50, debounce_ms // 3)


def is_kernel_file(path: Path, root: Path) -> bool:
    """`kernels/<name>.py` directly under the worktree; editor temp/backup files are not."""
    try:
        rel = path.relative_to(root)
    except ValueError:
        return False
    return (len(rel.parts) == 2 and rel.parts[0] == KERNELS_DIR and path.suffix == ".py"
            and not path.name.startswith((".", "#")))


def collapse(changes: Iterable[tuple[object, str]], root: Path) -> set[Path]:
    """Reduce raw (change, path) events to the kernel files that exist after the burst.

    A temp-file-and-rename save shows up as added/deleted/modified events on several names;
    what matters is which kernel files now hold new content, so deletions are dropped and
    each file appears once.
    """
    out: set[Path] = set()
    for _change, raw in changes:
        path = Path(raw)
        if is_kernel_file(path, root) and path.is_file():
            out.add(path)
    return out


def _digest(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


class KernelWatcher:
    """Watches `root/kernels/*.py`; calls `on_change(paths)` once per debounced burst."""

    def __init__(self, *, root: Path, on_change: Callable[[set[Path]], None],
                 debounce_ms: int = DEBOUNCE_MS) -> None:
        self.root = Path(root).resolve()
        self.on_change = on_change
        self.debounce_ms = debounce_ms
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._seen: dict[Path, str | None] = {}

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        """Start watching (returns once the watch is armed)."""
        if self.running:
            return
        self._stop.clear()
        self._ready.clear()
        for path in (self.root / KERNELS_DIR).glob("*.py"):
            self._seen[path] = _digest(path)
        self._thread = threading.Thread(target=self._watch, name="kopt-watch", daemon=True)
        self._thread.start()
        self._ready.wait(timeout=5)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._thread = None

    def remember(self, path: Path) -> None:
        """Treat the file's current content as already seen (e.g. after kopt wrote it)."""
        self._seen[Path(path).resolve()] = _digest(Path(path))

    def changed(self, paths: set[Path]) -> set[Path]:
        """The paths whose content differs from the last content seen (and remember it)."""
        out = set()
        for path in paths:
            digest = _digest(path)
            if digest is not None and self._seen.get(path) != digest:
                self._seen[path] = digest
                out.add(path)
        return out

    def _watch(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        # yield_on_timeout: the first (empty) yield tells us the OS watch is armed.
        for changes in watchfiles.watch(self.root, debounce=self.debounce_ms,
                                        step=quiet_ms(self.debounce_ms),
                                        stop_event=self._stop, rust_timeout=100,
                                        yield_on_timeout=True, raise_interrupt=False):
            self._ready.set()
            paths = self.changed(collapse(changes, self.root))
            if paths:
                self.on_change(paths)
