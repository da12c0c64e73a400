"""`static_clean`: the candidate's source, read before anything runs, refused when it reaches
for the harness's observers or for an escape hatch no honest kernel needs.

The dynamic checks observe the candidate's process from inside it; this is the second line
(as KernelBench's and GPU MODE's checkers do it): parse the file with `ast` and name, with its
line, every use of

- frame and stack inspection (`sys._getframe`, `inspect`, `traceback`, `f_back`, `f_locals`,
  `gi_frame`, ...), and function internals (`__code__`, `__globals__`, `__closure__`,
  `__kwdefaults__`, `__defaults__`, `__builtins__`);
- dispatch-mode and profiler internals (`_get_current_dispatch_mode`, `_disable_current_modes`,
  `TorchDispatchMode`, `__torch_dispatch__`, `__torch_function__`, `_python_dispatch`,
  `torch._C`, `torch.autograd.profiler`, `_disable_profiler`);
- `gc`, `ctypes`, `cffi`, `importlib`, `__import__`, `exec`/`eval`/`compile`, `marshal`,
  `pickle`, `types.CodeType`, `sys.modules`, `sys.settrace`/`setprofile`/`addaudithook`;
- patching: assignment to an attribute of an imported module or of something reached from
  one (`torch.x = ...`, `torch.Tensor.add = ...`), `setattr`/`delattr` on anything but `self`,
  `builtins`;
- other array libraries doing the compute (`numpy`, `cupy`, `jax`, `tensorflow`, `numba`,
  `scipy`, `pandas`, `tinygrad`, `mlx`);
- the process and its environment (`os`, `sys.argv`, `subprocess`, `signal`, `socket`,
  `multiprocessing`, `threading`, `concurrent`, `asyncio`, `/proc`, `resource`, `pty`,
  `shutil`, `tempfile`, `pathlib`, `io`), and `open` (file I/O: an honest kernel reads no file);
- Triton's runtime internals (`triton.runtime`, `triton.backends`, `triton.knobs`,
  `triton._C`, `triton.compiler`), through which launches are counted.

Allowed (what honest kernels need): `import torch`, `torch.nn`, `torch.nn.functional`,
`triton`, `triton.language` (and `tl.extra`/`libdevice`), `math`, `functools`, `typing`,
`dataclasses`, `enum`, `itertools`, `operator`, `collections`, `__future__`; `@triton.jit`,
`@triton.autotune`, `triton.Config`, `@triton.heuristics`, `triton.cdiv`, `triton.next_power_of_2`;
torch ops for bookkeeping in a launcher (`torch.empty`, `empty_like`, views, `reshape`,
`contiguous`, small reductions); `torch.compile` around a launcher; `self.x = ...` in a module.
Whether PyTorch does the compute is judged at run time (`no_pytorch_fallback`).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

ALLOWED_MODULES = frozenset({
    "torch", "torch.nn", "torch.nn.functional", "triton", "triton.language",
    "triton.language.extra", "triton.language.extra.libdevice", "triton.language.extra.cuda",
    "triton.language.extra.cuda.libdevice", "math", "functools", "typing", "dataclasses",
    "enum", "itertools", "operator", "collections", "__future__", "numbers",
})
"""Modules a candidate may import (and their names only: `from torch import nn`)."""

REFUSED_NAMES: dict[str, str] = {
    "_getframe": "frame inspection", "f_back": "frame inspection", "f_locals": "frame inspection",
    "f_globals": "frame inspection", "f_code": "frame inspection", "tb_frame": "frame inspection",
    "gi_frame": "frame inspection", "cr_frame": "frame inspection", "currentframe": "frame inspection",
    "stack": None,
    "__code__": "function internals", "__globals__": "function internals",
    "__closure__": "function internals", "__kwdefaults__": "function internals",
    "__defaults__": "function internals", "__builtins__": "builtins",
    "__subclasses__": "object graph walk", "__bases__": None, "__mro__": None,
    "__dict__": None,
    "_get_current_dispatch_mode": "dispatch-mode internals",
    "_disable_current_modes": "dispatch-mode internals",
    "TorchDispatchMode": "dispatch-mode internals", "__torch_dispatch__": "dispatch-mode internals",
    "__torch_function__": "torch function overrides", "_python_dispatch": "dispatch-mode internals",
    "_pop_mode": "dispatch-mode internals", "_push_mode": "dispatch-mode internals",
    "_set_torch_function_mode": "dispatch-mode internals",
    "_disable_profiler": "profiler internals", "_enable_profiler": "profiler internals",
    "_C": "torch/triton C internals", "_dynamo": "compiler internals", "_inductor": None,
    "__import__": "dynamic import", "exec": "dynamic code", "eval": "dynamic code",
    "compile": None, "globals": "namespace access", "locals": "namespace access",
    "vars": "namespace access", "setattr": "patching", "delattr": "patching",
    "open": "file I/O", "breakpoint": "debugger",
    "settrace": "tracing hooks", "setprofile": "tracing hooks", "addaudithook": "audit hooks",
    "modules": None, "get_objects": "gc", "get_referrers": "gc", "get_referents": "gc",
    "CodeType": "function internals", "FunctionType": "function internals",
}
"""Names refused wherever they appear (attribute or plain name); None: only as an attribute
of a refused module (`inspect.stack`, `sys.modules`), or see `_ALLOWED_CONTEXT`."""

_ALLOWED_CONTEXT = {"compile": ("torch",), "stack": ("torch",), "modules": (),
                    "__dict__": (), "__bases__": (), "__mro__": (), "_inductor": ()}
"""Names allowed as an attribute of these modules only (`torch.compile`, `torch.stack`)."""

REFUSED_MODULES: dict[str, str] = {
    "inspect": "frame inspection", "traceback": "frame inspection", "gc": "gc",
    "ctypes": "ctypes", "cffi": "ctypes", "importlib": "dynamic import", "imp": "dynamic import",
    "marshal": "code objects", "pickle": "code objects", "dill": "code objects",
    "cloudpickle": "code objects", "types": "function internals", "builtins": "builtins",
    "sys": "interpreter internals", "os": "process and environment",
    "subprocess": "process and environment", "signal": "process and environment",
    "socket": "network", "multiprocessing": "processes", "threading": "threads",
    "_thread": "threads", "concurrent": "threads", "asyncio": "threads", "resource": "process",
    "pty": "process", "shutil": "file I/O", "tempfile": "file I/O", "pathlib": "file I/O",
    "io": "file I/O", "glob": "file I/O", "mmap": "file I/O", "fcntl": "file I/O",
    "atexit": "exit hooks", "weakref": "object graph", "faulthandler": "process",
    "numpy": "another array library doing the compute", "cupy": "another array library",
    "jax": "another array library", "jaxlib": "another array library",
    "tensorflow": "another array library", "numba": "another array library",
    "scipy": "another array library", "pandas": "another array library",
    "tinygrad": "another array library", "mlx": "another array library",
    "safetensors": "file I/O", "kopt": "the harness itself", "time": "clocks",
    "timeit": "clocks", "random": "host randomness", "secrets": "host randomness",
    "triton.runtime": "Triton's launch path", "triton.backends": "Triton's driver",
    "triton.knobs": "Triton's hooks", "triton._C": "Triton's C internals",
    "triton.compiler": "Triton's compiler internals", "triton.testing": "Triton's benchmarking",
    "torch.utils": "torch internals", "torch.autograd": "profiler and autograd internals",
    "torch.profiler": "profiler", "torch.cuda": None, "torch.library": "op registration",
    "torch.overrides": "torch function overrides", "torch.fx": "graph internals",
}
"""Imports refused, with why (a prefix refuses its submodules). None: allowed."""

PROC_STRINGS = ("/proc", "/dev/shm", "/sys/", "site-packages", ".pth", "LD_PRELOAD")


@dataclass
class Finding:
    """One refused construct: where and why."""

    line: int
    what: str
    why: str

    def text(self) -> str:
        return f"line {self.line}: {self.what} ({self.why})"


def _module_refusal(name: str) -> str | None:
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        prefix = ".".join(parts[:i])
        if prefix in REFUSED_MODULES:
            return REFUSED_MODULES[prefix]
    if name in ALLOWED_MODULES or parts[0] in ("torch", "triton"):
        return None
    return "not on the list of modules a kernel needs"


def _root_name(node: ast.AST) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.value if not isinstance(node, ast.Call) else node.func
    return node.id if isinstance(node, ast.Name) else None


def parse_source(source: str, filename: str = "candidate.py") -> ast.Module:
    """`ast.parse`, once more on a fresh thread with a large stack when the interpreter's AST
    recursion bookkeeping fails (CPython 3.11's "AST constructor recursion depth mismatch",
    seen parsing a 100-layer ResNet's candidate from a deep call stack); SyntaxError as usual."""
    try:
        return ast.parse(source, filename=filename)
    except (SystemError, RecursionError, MemoryError) as first:
        import threading

        box: dict[str, object] = {}

        def parse() -> None:
            try:
                box["tree"] = ast.parse(source, filename=filename)
            except BaseException as err:  # noqa: BLE001 - re-raised on the caller's thread
                box["error"] = err

        old = threading.stack_size()
        threading.stack_size(256 * 1024 * 1024)
        try:
            worker = threading.Thread(target=parse, name="kopt-parse")
            worker.start()
        finally:
            threading.stack_size(old)
        worker.join()
        if "tree" in box:
            return box["tree"]  # type: ignore[return-value]
        error = box.get("error")
        if isinstance(error, SyntaxError):
            raise error from None
        raise SyntaxError(f"{filename} is too deeply nested for Python's parser "
                          f"({type(first).__name__}: {first})") from first


def scan_source(source: str, filename: str = "candidate.py") -> list[Finding]:
    """Every refused construct in `source` (raises SyntaxError when it does not parse)."""
    tree = parse_source(source, filename=filename)
    found: list[Finding] = []
    imported: dict[str, str] = {}  # local name -> module it names
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                imported[(alias.asname or alias.name).split(".")[0]] = (
                    alias.name if alias.asname else alias.name.split(".")[0])
                why = _module_refusal(alias.name)
                if why:
                    found.append(Finding(node.lineno, f"import {alias.name}", why))
        elif isinstance(node, ast.ImportFrom):
            mod = node.module or ""
            if node.level:
                found.append(Finding(node.lineno, f"from {'.' * node.level}{mod} import ...",
                                     "relative import: a candidate stands alone"))
                continue
            why = _module_refusal(mod)
            if why:
                found.append(Finding(node.lineno, f"from {mod} import ...", why))
            for alias in node.names:
                full = f"{mod}.{alias.name}"
                sub = REFUSED_MODULES.get(full)
                if sub:
                    found.append(Finding(node.lineno, f"from {mod} import {alias.name}", sub))
                name_why = REFUSED_NAMES.get(alias.name)
                if name_why:
                    found.append(Finding(node.lineno, f"from {mod} import {alias.name}", name_why))
                imported[alias.asname or alias.name] = full
    module_names = set(imported)
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Attribute):
            why = REFUSED_NAMES.get(node.attr)
            root = _root_name(node.value)
            base = imported.get(root or "", root or "")
            if node.attr in _ALLOWED_CONTEXT:
                # `torch.compile`, `torch.stack`; `self.modules()` is the candidate's own.
                if root in module_names and base.split(".")[0] not in _ALLOWED_CONTEXT[node.attr]:
                    found.append(Finding(line, f"{base}.{node.attr}",
                                         why or "interpreter internals"))
            elif why:
                found.append(Finding(line, f".{node.attr}", why))
            if isinstance(node.ctx, (ast.Store, ast.Del)) and root in module_names:
                found.append(Finding(line, f"assignment to {ast.unparse(node)}",
                                     "patching an imported module"))
        elif isinstance(node, ast.Name):
            why = REFUSED_NAMES.get(node.id)
            if why and node.id not in _ALLOWED_CONTEXT:
                found.append(Finding(line, node.id, why))
            elif node.id == "compile" and imported.get("compile") != "torch.compile":
                found.append(Finding(line, "compile", "dynamic code"))
            if isinstance(node.ctx, ast.Store) and node.id in ("torch", "triton", "tl", "nn"):
                found.append(Finding(line, f"assignment to {node.id}", "rebinding a module"))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
                node.func.id in ("getattr", "hasattr") and len(node.args) >= 2 and \
                not isinstance(node.args[1], ast.Constant) and \
                _root_name(node.args[0]) in module_names:
            found.append(Finding(line, f"{node.func.id}({ast.unparse(node.args[0])}, <computed name>)",
                                 "an attribute of a module by a name built at run time"))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if REFUSED_NAMES.get(node.value) or node.value in REFUSED_MODULES:
                found.append(Finding(line, f"string {node.value!r}",
                                     f"names {REFUSED_NAMES.get(node.value) or REFUSED_MODULES.get(node.value) or 'a refused module'}"))
            hit = next((p for p in PROC_STRINGS if p in node.value), None)
            if hit:
                found.append(Finding(line, f"string {node.value[:40]!r}",
                                     f"names {hit}: process, environment or interpreter files"))
    found.sort(key=lambda f: (f.line, f.what))
    unique: dict[tuple[int, str], Finding] = {}
    for f in found:
        unique.setdefault((f.line, f.what), f)
    return list(unique.values())


def scan_file(path: Path) -> list[Finding]:
    return scan_source(path.read_text(encoding="utf-8"), filename=str(path))
