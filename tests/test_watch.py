"""The kernel watcher: debounced, collapsed, atomic saves included, content-aware."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from watchfiles import Change

from kopt.workbench.watch import KernelWatcher, collapse, is_kernel_file


class Calls:
    """Collects on_change calls from the watcher thread."""

    def __init__(self) -> None:
        self.calls: list[set[Path]] = []
        self.event = threading.Event()

    def __call__(self, paths: set[Path]) -> None:
        self.calls.append(paths)
        self.event.set()

    def wait(self, seconds: float = 5.0) -> None:
        assert self.event.wait(seconds), "the watcher never reported a change"
        time.sleep(0.6)  # would a second (un-collapsed) call follow?


def make_worktree(tmp_path: Path) -> tuple[Path, Path]:
    root = tmp_path / "wt"
    (root / "kernels").mkdir(parents=True)
    kernel = root / "kernels" / "layernorm_gelu.py"
    kernel.write_text("x = 1\n")
    return root.resolve(), kernel.resolve()


def test_kernel_file_filter(tmp_path: Path) -> None:
    root = tmp_path
    assert is_kernel_file(root / "kernels" / "a.py", root)
    assert not is_kernel_file(root / "kernels" / ".a.py.swp", root)
    assert not is_kernel_file(root / "kernels" / "a.py~", root)
    assert not is_kernel_file(root / "kernels" / "a.metrics.json", root)
    assert not is_kernel_file(root / "case" / "model.py", root)
    assert not is_kernel_file(tmp_path.parent / "kernels" / "a.py", root)


def test_collapse_keeps_existing_kernels_once(tmp_path: Path) -> None:
    root, kernel = make_worktree(tmp_path)
    tmp = root / "kernels" / ".layernorm_gelu.py.tmp"
    changes = [(Change.added, str(tmp)), (Change.deleted, str(tmp)),
               (Change.modified, str(kernel)), (Change.added, str(kernel)),
               (Change.deleted, str(root / "kernels" / "gone.py"))]
    assert collapse(changes, root) == {kernel}


def test_atomic_save_is_one_change(tmp_path: Path) -> None:
    root, kernel = make_worktree(tmp_path)
    calls = Calls()
    watcher = KernelWatcher(root=root, on_change=calls, debounce_ms=200)
    watcher.start()
    try:
        # An editor's atomic save: write a temp file, fsync, rename over the kernel.
        tmp = root / "kernels" / ".layernorm_gelu.py.swp"
        tmp.write_text("x = 2\n")
        os.replace(tmp, kernel)
        calls.wait()
    finally:
        watcher.stop()
    assert calls.calls == [{kernel}]
    assert not watcher.running


def test_burst_of_saves_collapses(tmp_path: Path) -> None:
    root, kernel = make_worktree(tmp_path)
    calls = Calls()
    watcher = KernelWatcher(root=root, on_change=calls, debounce_ms=1000)
    watcher.start()
    try:
        for i in range(5):
            kernel.write_text(f"x = {i + 10}\n")
            time.sleep(0.02)
        calls.wait()
    finally:
        watcher.stop()
    assert len(calls.calls) == 1
    assert kernel.read_text() == "x = 14\n"


def test_same_content_and_other_files_are_ignored(tmp_path: Path) -> None:
    root, kernel = make_worktree(tmp_path)
    calls = Calls()
    watcher = KernelWatcher(root=root, on_change=calls, debounce_ms=100)
    watcher.start()
    try:
        kernel.write_text("x = 1\n")  # a save without changes
        (root / "kernels" / "layernorm_gelu.metrics.json").write_text("{}")
        (root / "notes.py").write_text("y = 1\n")
        time.sleep(0.8)
        assert calls.calls == []
        kernel.write_text("x = 3\n")
        calls.wait()
    finally:
        watcher.stop()
    assert calls.calls == [{kernel}]
