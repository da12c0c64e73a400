"""Tuning memory: what launch configuration won, per GPU model, kernel pattern and shape bucket.

`.kopt/tuning/<gpu>.json` maps `<pattern>|<shape bucket>` to the winner and its evidence:

    {"config": {"BLOCK_SIZE": 2048, "num_warps": 8}, "median_ms": 0.121,
     "baseline_ms": 0.217, "date": "2026-11-25", "commit": "...", "case": "...",
     "kernel": "_g0_softmax_kernel", "run_id": "...", "torch": "2.11.0", "triton": "3.6.0",
     "settled": {"BLOCK_SIZE": [1024, 4096], "num_warps": [4, 16]}}

`settled`: the values each parameter's steps tried from the winning value that gained
nothing; a later search at the same configuration of the kernel (and the same compilers'
versions) does not time them again (phases.search.CoordinateSearch.settled).

- The *pattern* is a stable signature of the fused group: the sha256 of the kernel's
  `@triton.jit` function with its name replaced and comments dropped (`ast.unparse`), so
  the same fusion in another case, or under another group index, matches; a kernel
  written differently does not.
- The *shape bucket* is every input's shape with each dimension rounded up to a power of
  two (`4096x8192,8192`), so neighbouring sizes share a winner.

An entry is only a starting point: the accelerator times it against the kernel's own default
before its search, and the search goes on from whichever is faster. `kopt memory` lists
the entries, `kopt memory --clear` removes them.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any

from kopt.harness.paths import kopt_dir


def memory_dir() -> Path:
    return kopt_dir() / "tuning"


def gpu_file(gpu: str) -> Path:
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in gpu.strip()) or "gpu"
    return memory_dir() / f"{safe}.json"


def kernel_pattern(source: str, kernel: str | None) -> str:
    """A stable signature of `kernel` (a `@triton.jit` function in `source`; None: the whole
    module but its launch configuration): 16 hex digits."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return hashlib.sha256(source.encode()).hexdigest()[:16]
    if kernel:
        for node in tree.body:  # a kernel named after another with the same code (`_g9 = _g4`)
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and \
                    isinstance(node.targets[0], ast.Name) and node.targets[0].id == kernel and \
                    isinstance(node.value, ast.Name):
                kernel = node.value.id
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name == kernel:
                node = ast.parse(ast.unparse(node)).body[0]  # a copy
                assert isinstance(node, ast.FunctionDef)
                node.name = "_kernel"
                return hashlib.sha256(ast.unparse(node).encode()).hexdigest()[:16]
    body = [n for n in tree.body
            if not (isinstance(n, ast.Assign) and len(n.targets) == 1
                    and isinstance(n.targets[0], ast.Name)
                    and n.targets[0].id in ("KOPT_CONFIG", "KOPT_TUNABLES"))]
    return hashlib.sha256(ast.unparse(ast.Module(body=body, type_ignores=[])).encode()
                          ).hexdigest()[:16]


def _pow2(n: int) -> int:
    return 1 if n <= 1 else 1 << (int(n) - 1).bit_length()


def shape_bucket(shapes: list[list[int] | tuple[int, ...]]) -> str:
    """`[[37, 123], [123]]` -> `64x128,128`."""
    return ",".join("x".join(str(_pow2(d)) for d in s) or "scalar" for s in shapes)


def key_of(pattern: str, bucket: str) -> str:
    return f"{pattern}|{bucket}"


def load_file(file: Path) -> dict[str, dict[str, Any]]:
    """A memory file's entries by key; empty when it is missing or unreadable."""
    try:
        data = json.loads(file.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def write_file(file: Path, data: dict[str, Any]) -> Path:
    """Write a memory file atomically (a reader never sees half of it)."""
    file.parent.mkdir(parents=True, exist_ok=True)
    tmp = file.with_name(f".{file.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    tmp.replace(file)
    return file


def entries_in(folder: Path) -> list[dict[str, Any]]:
    """Every entry of the memory files in `folder`, on every GPU: `{"gpu", "pattern",
    "bucket", "file", ...evidence}`."""
    out: list[dict[str, Any]] = []
    if not folder.is_dir():
        return out
    for file in sorted(folder.glob("*.json")):
        for key, entry in sorted(load_file(file).items()):
            pattern, _, bucket = key.partition("|")
            out.append({"gpu": entry.get("gpu", file.stem), "pattern": pattern, "bucket": bucket,
                        "file": str(file), **{k: v for k, v in entry.items() if k != "gpu"}})
    return out


def clear_folder(folder: Path) -> int:
    """Remove the memory files in `folder`; how many entries they held."""
    n = len(entries_in(folder))
    if folder.is_dir():
        for file in folder.glob("*.json"):
            file.unlink()
    return n


def load(gpu: str) -> dict[str, dict[str, Any]]:
    return load_file(gpu_file(gpu))


def recall(gpu: str, pattern: str, bucket: str) -> dict[str, Any] | None:
    entry = load(gpu).get(key_of(pattern, bucket))
    return entry if isinstance(entry, dict) and isinstance(entry.get("config"), dict) else None


def remember(gpu: str, pattern: str, bucket: str, entry: dict[str, Any]) -> Path:
    """Store `entry` (config + evidence) for this GPU, pattern and bucket (atomically)."""
    data = load(gpu)
    data[key_of(pattern, bucket)] = {"date": time.strftime("%Y-%m-%d", time.gmtime()),
                                     "gpu": gpu, **entry}
    return write_file(gpu_file(gpu), data)


def entries() -> list[dict[str, Any]]:
    """Every remembered winner, on every GPU: `{"gpu", "pattern", "bucket", ...evidence}`."""
    return entries_in(memory_dir())


def clear() -> int:
    """Remove every remembered winner; how many entries there were."""
    return clear_folder(memory_dir())
