"""KernelBench-style problems as cases, and new cases from a template.

A KernelBench problem file defines `class Model(nn.Module)`, `get_inputs()` (the forward's
arguments) and `get_init_inputs()` (the constructor's), usually from module-level size
constants. `import_kernelbench` runs those functions in a subprocess (the file is user code:
it may hang, crash or allocate), copies the file unmodified as the case's `model.py`, and
derives `manifest.yaml` from what they returned:

- tensors: shape, dtype, layout (a transposed view stays one), value distribution (normal,
  uniform, bernoulli, or randint over the observed range of an integer tensor, widened to a
  count constant such as `num_classes` when one bounds it);
- non-tensor forward arguments: `{value: ...}`; constructor arguments: `model.init_kwargs`
  when they bind to named parameters, else `model.init_args`;
- a `smoke` set: every size above `SMOKE_DIM` shrinks, equal sizes to equal sizes (so a
  matmul's inner dims still agree and an index range still matches its table), constructor
  sizes with them when they are keyword arguments; sizes fixed by positional constructor
  arguments are kept.

Every guess is written into the manifest's description, so the user can check it.
"""

from __future__ import annotations

import inspect
import json
import math
import os
import re
import shutil
import string
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from kopt.harness.case import DTYPES, MANIFEST_NAME, load_case_dir
from kopt.harness.errors import BadInputError, CaseError
from kopt.harness.paths import import_root, user_cases_dir

# Sizes above this shrink in the smoke set: 64 keeps a row or a matmul tile non-trivial while
# the Triton interpreter runs a whole smoke forward in about a second.
SMOKE_DIM = 64
# Smoke sizes handed out in order to distinct large sizes (distinct, so that a smoke run still
# tells in_features from out_features); the odd twin replaces a size that was not a multiple of
# 16, so a masking bug at ragged edges still shows.
SMOKE_SIZES = (64, 96, 48, 80, 112, 40, 72, 56)
# No smoke tensor above this many elements (about 1 MB of float32): smaller dims halve until it fits.
SMOKE_MAX_NUMEL = 1 << 18
# No op of the smoke forward may produce more elements than this: the Triton interpreter walks
# a generated kernel's output program by program, and an architect + optimizer smoke run must
# finish in under a minute on a 2-core CPU (a 2 M-element transposed-convolution output took
# over 300 s, issue 22; on 2026-11-25 a 246 K-element convolution epilogue took 246 s to verify
# on a shared 2-core machine, load 12).
SMOKE_OP_BUDGET = 1 << 16
# A shrunk size never goes below this (the batch: 2): a 4x4 image still has edges and a middle ...
SMOKE_MIN = 4
# ... nor below a constructor int up to this size that it was at least (kernel and pool sizes).
SMOKE_KERNEL_MAX = 16
# Smoke sizings built and run at most per import (each a constructor and one smoke forward).
SMOKE_TRIALS = 12
# ... and at most this many more, each one input dim shrunk by position, when every sizing by
# value stayed over budget (a size the model ties to a weight shares its value with one that
# is free to shrink: a LayerNorm over a last dim of 32 beside a depth of 32).
SMOKE_POSITION_TRIALS = 12
# get_inputs() is drawn this many times (seeds 0, 1, ...) to observe integer value ranges.
PROBE_DRAWS = 3
PROBE_TIMEOUT_S = 300
# A module-level int constant whose name says "count of categories" may bound an index tensor.
_COUNT_NAME = re.compile(r"class|vocab|categor|label|token|^num_|^n_|_num$|bins|experts", re.I)
TEMPLATES_DIR = Path(__file__).resolve().parent / "templates"


# ---------------------------------------------------------------------------------------------
# The probe: runs inside a subprocess (`python -m kopt.harness.kernelbench FILE`).


def _jsonable(value: Any) -> Any:
    """A plain JSON value for a non-tensor argument, or raise TypeError."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    raise TypeError(f"{type(value).__name__} {value!r}")


def _describe_tensor(t: Any, layout: Any = None) -> dict[str, Any]:
    """An input tensor's shape, dtype, layout and value statistics; `layout`: the full draw's
    tensor (meta) when `t` is a sample of it (`harness.probe_draw`)."""
    import torch

    x = t.detach().cpu()
    full = x if layout is None else layout
    info: dict[str, Any] = {"kind": "tensor", "shape": list(full.shape),
                            "dtype": str(x.dtype).removeprefix("torch."),
                            "contiguous": full.is_contiguous(), "transposed": False}
    if not full.is_contiguous() and full.dim() >= 2 and full.transpose(-1, -2).is_contiguous():
        info["transposed"] = True
    if x.numel() == 0:
        return info
    if x.dtype == torch.bool:
        info["p"] = float(x.float().mean())
    elif x.dtype.is_floating_point:
        f = x.float()
        info.update(min=float(f.min()), max=float(f.max()), mean=float(f.mean()),
                    std=float(f.std()) if f.numel() > 1 else 0.0, numel=f.numel())
    elif not x.dtype.is_complex:
        info.update(min=int(x.min()), max=int(x.max()))
    return info


def parse_input_shapes(text: str) -> list[tuple[list[int], str]]:
    """`8x128:float32,8x128` -> [([8, 128], 'float32'), ([8, 128], 'float32')]."""
    specs: list[tuple[list[int], str]] = []
    for item in filter(None, (t.strip() for t in text.split(","))):
        shape_text, _, dtype = item.partition(":")
        dtype = dtype or "float32"
        try:
            shape = [int(x) for x in shape_text.lower().split("x")]
        except ValueError:
            shape = []
        if not shape or any(n < 0 for n in shape) or dtype not in DTYPES:
            raise BadInputError(f"--inputs item {item!r} is not SIZExSIZE[:DTYPE]",
                                fix="write e.g. --inputs 8x128:float32,8x128 (dtype one of "
                                    f"{', '.join(sorted(set(DTYPES.values())))})")
        specs.append((shape, DTYPES[dtype]))
    if not specs:
        raise BadInputError(f"--inputs {text!r} names no tensor", fix="write e.g. --inputs 8x128")
    return specs


def _inputs_from_shapes(specs: list[tuple[list[int], str]]) -> Any:
    import torch

    def get_inputs() -> list[Any]:
        out = []
        for shape, dtype in specs:
            dt = getattr(torch, dtype)
            if dt.is_floating_point:
                out.append(torch.randn(shape, dtype=dt))
            elif dt == torch.bool:
                out.append(torch.rand(shape) < 0.5)
            else:
                out.append(torch.randint(0, 100, shape, dtype=dt))
        return out

    return get_inputs


def probe(file: Path, class_name: str = "Model",
          input_shapes: list[tuple[list[int], str]] | None = None) -> dict[str, Any]:
    """Import `file`, call get_init_inputs()/get_inputs() (or draw `input_shapes`), describe
    what they return."""
    import importlib.util

    import torch

    from kopt.harness import probe_draw

    def fail(error: str, fix: str) -> dict[str, Any]:
        return {"ok": False, "error": error, "fix": fix}

    spec = importlib.util.spec_from_file_location("kernelbench_problem", file)
    if spec is None or spec.loader is None:
        return fail("cannot be imported as a Python module", "pass a .py file")
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(file.parent))
    try:
        spec.loader.exec_module(module)
    except BaseException as err:  # user code
        return fail(f"does not import: {type(err).__name__}: {err}", f"run `python {file}`")
    finally:
        sys.path.remove(str(file.parent))
    cls = getattr(module, class_name, None)
    if not (isinstance(cls, type) and issubclass(cls, torch.nn.Module)):
        if class_name == "Model":
            return fail("defines no `class Model(nn.Module)`",
                        "a KernelBench file names its module Model")
        return fail(f"defines no nn.Module class {class_name!r}", "name a class the file defines")
    get_inputs = (_inputs_from_shapes(input_shapes) if input_shapes
                  else getattr(module, "get_inputs", None))
    if not callable(get_inputs):
        return fail("defines no get_inputs()", "add get_inputs() returning the forward's "
                    "arguments" + ("" if class_name == "Model" else ", or pass --inputs SHAPES"))
    try:
        torch.manual_seed(0)
        get_init = getattr(module, "get_init_inputs", None)
        init = list(get_init()) if callable(get_init) else []
    except BaseException as err:
        return fail(f"get_init_inputs() raised {type(err).__name__}: {err}",
                    "fix get_init_inputs() so that it returns the constructor's arguments")
    try:
        init_json = _jsonable(init)
    except TypeError as err:
        return fail(f"get_init_inputs() returned a value kopt cannot write down: {err}",
                    "return only numbers, strings, booleans and lists/tuples of them")
    inputs: list[dict[str, Any]] = []
    for seed in range(PROBE_DRAWS):  # one draw at a time: a full-size problem may be large
        if seed and not any(isinstance(i.get("min"), int) for i in inputs):
            break  # later draws only widen integer ranges
        torch.manual_seed(seed)
        try:  # a sample of a large draw when its structure allows (harness.probe_draw)
            drawn = probe_draw.draw(get_inputs)
        except BaseException as err:
            return fail(f"get_inputs() raised {type(err).__name__}: {err}",
                        "fix get_inputs() so that it returns the forward's arguments")
        if not isinstance(drawn.values, (list, tuple)):
            return fail(f"get_inputs() returned a {type(drawn.values).__name__}, not a list",
                        "return a list of the forward's arguments, e.g. [x]")
        for i, value in enumerate(drawn.values):
            if seed > 0:  # later draws only widen integer ranges
                if isinstance(value, torch.Tensor) and isinstance(inputs[i].get("min"), int):
                    other = _describe_tensor(value)
                    inputs[i]["min"] = min(inputs[i]["min"], other["min"])
                    inputs[i]["max"] = max(inputs[i]["max"], other["max"])
            elif isinstance(value, torch.Tensor):
                inputs.append(_describe_tensor(value, drawn.layout[i] if drawn.layout else None))
            else:
                try:
                    inputs.append({"kind": "value", "value": _jsonable(value)})
                except TypeError as err:
                    return fail(f"get_inputs() item {i} is not a tensor or a plain value: {err}",
                                "return tensors, numbers, strings or lists of them")
        del drawn
    names: list[str] | None = None
    try:
        bound = inspect.signature(cls.__init__).bind(None, *init)
        params = inspect.signature(cls.__init__).parameters
        if all(params[n].kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
               for n in list(bound.arguments)[1:]):
            names = list(bound.arguments)[1:]
            # Integer parameters left at their defaults are sizes too (`hidden=300`): written
            # down, they shrink with the inputs in smoke.
            for pname, param in params.items():
                if (names is not None and pname not in bound.arguments
                        and param.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                           inspect.Parameter.KEYWORD_ONLY)
                        and type(param.default) is int):
                    names.append(pname)
                    init.append(param.default)
            init_json = _jsonable(init)
    except (TypeError, ValueError):
        names = None

    def build() -> Any:
        return cls(**dict(zip(names, init, strict=True))) if names is not None else cls(*init)

    try:
        with torch.device("meta"):
            built = build()
    except BaseException:
        try:
            built = build()
        except BaseException as err:
            return fail(f"Model(*get_init_inputs()) raised {type(err).__name__}: {err}",
                        "make get_init_inputs() match Model's constructor")
    try:  # a lazy module's uninitialised parameters have no shape yet
        state_shapes: list[list[int]] | None = [
            list(t.shape) for t in [*built.parameters(), *built.buffers()]]
    except Exception:  # noqa: BLE001 - then no argument is told apart as a non-size
        state_shapes = None
    constants = {k: v for k, v in vars(module).items()
                 if not k.startswith("_") and type(v) in (int, float)}
    doc = inspect.getdoc(cls) or ""
    return {"ok": True, "class": class_name, "inputs": inputs, "init": init_json, "init_names": names,
            "constants": constants, **({"state_shapes": state_shapes} if state_shapes is not None else {}),
            "doc": doc.strip().splitlines()[0] if doc.strip() else ""}


class _ProbeStandby:
    """One probe process started ahead of its file (`--standby`): torch and kopt's harness
    imported, waiting for a request on stdin, so that `kopt suite` skips those imports for
    every problem after the first. It has run no user code; it exits when its stdin closes
    (the parent is gone). Used only when `import_kernelbench(..., warm=True)`."""

    def __init__(self) -> None:
        import threading

        self._lock = threading.Lock()
        self._proc: subprocess.Popen[str] | None = None
        self._env: dict[str, str] | None = None

    def take(self, env: dict[str, str]) -> subprocess.Popen[str] | None:
        with self._lock:
            proc, penv, self._proc, self._env = self._proc, self._env, None, None
        if proc is not None and (penv != env or proc.poll() is not None):
            proc.kill()
            proc.wait()
            return None
        return proc

    def prepare(self, env: dict[str, str]) -> None:
        with self._lock:
            if self._proc is not None:
                return
            try:
                self._proc = subprocess.Popen(
                    [sys.executable, "-m", "kopt.harness.kernelbench", "--standby"],
                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                    text=True, env=env, cwd=tempfile.gettempdir(), start_new_session=True)
                self._env = env
            except OSError:
                self._proc = None


    def clear(self) -> None:
        with self._lock:
            proc, self._proc, self._env = self._proc, None, None
        if proc is not None:
            proc.kill()
            proc.wait()


_STANDBY = _ProbeStandby()


def close_probe_standby() -> None:
    """End the waiting probe process, if any (`kopt suite` calls this when it is done)."""
    _STANDBY.clear()


def _run_probe(file: Path, name: str, class_name: str = "Model", inputs: str | None = None,
               origin: str | None = None, warm: bool = False
               ) -> tuple[dict[str, Any], dict[str, Any]]:
    """Probe `file` and derive its manifest (smoke trials included) in a subprocess: the
    manifest and the smoke report's dict. `warm`: take a standby probe process when one is
    waiting, and leave one waiting for the next call."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(import_root()), env.get("PYTHONPATH", "")])
    request = {"name": name, "class": class_name, "inputs": inputs, "origin": origin}
    proc = _STANDBY.take(env) if warm else None
    if proc is None:
        proc = subprocess.Popen([sys.executable, "-m", "kopt.harness.kernelbench", str(file),
                                 json.dumps(request)], stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=env, cwd=str(file.parent), start_new_session=True)
        feed = None
    else:
        feed = json.dumps({"file": str(file), "request": request}) + "\n"
    if warm:
        _STANDBY.prepare(env)
    try:
        stdout, stderr = proc.communicate(feed, timeout=PROBE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        proc.wait()
        raise BadInputError(f"{file}: probing it did not finish within {PROBE_TIMEOUT_S} s",
                            fix="make the problem's sizes smaller") from None
    lines = stdout.strip().splitlines()
    try:
        result = json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        tail = (stderr.strip().splitlines() or ["no output"])[-1]
        raise BadInputError(f"{file}: importing it crashed (exit {proc.returncode}: {tail})",
                            fix=f"run `python {file}` to see why") from None
    if not result.get("ok"):
        raise BadInputError(f"{file}: {result['error']}", fix=result.get("fix"))
    return result["manifest"], result["smoke"]


def _subprocess_main(file: Path, request: dict[str, Any]) -> dict[str, Any]:
    shapes = parse_input_shapes(request["inputs"]) if request.get("inputs") else None
    result = probe(file, request.get("class") or "Model", shapes)
    if not result.get("ok"):
        return result
    if request.get("origin"):
        result["origin"] = request["origin"]
    manifest, report = derive_case(result, request["name"], file)
    return {"ok": True, "manifest": manifest, "smoke": report.to_dict()}


# ---------------------------------------------------------------------------------------------
# From the probe to a manifest.


def _round(x: float) -> float:
    """Three significant digits: enough to name a distribution, stable across draws."""
    return 0.0 if x == 0 else round(x, 2 - int(math.floor(math.log10(abs(x)))))


def _ints_in(value: Any) -> list[int]:
    if isinstance(value, bool):
        return []
    if isinstance(value, int):
        return [value]
    if isinstance(value, list):
        return [i for v in value for i in _ints_in(v)]
    return []


def sizes_anything(v: int, shapes: list[list[int]]) -> bool:
    """Whether a constructor int may size the model: some input or weight dim of at least
    SMOKE_MIN equals it, divides it or is divided by it (a width, a head count, a window of a
    sequence, a factor of an expansion). A period or a seed (`max_period=10000` beside sizes
    of 256 and 1024) is none of these: shrinking it with the sizes would change the function,
    not its size."""
    if v <= SMOKE_DIM:
        return True  # sizes at most SMOKE_DIM keep their value unless a smoke run is over budget
    dims = {d for shape in shapes for d in shape if d >= SMOKE_MIN}
    return any(d == v or d % v == 0 or v % d == 0 for d in dims)


def _remap(value: Any, sizes: dict[int, int]) -> Any:
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return sizes.get(value, value)
    if isinstance(value, list):
        return [_remap(v, sizes) for v in value]
    return value


@dataclass
class _Derivation:
    """A manifest under construction, with the guesses it made (for the description)."""

    args: list[dict[str, Any]] = field(default_factory=list)
    smoke_args: list[dict[str, Any]] = field(default_factory=list)
    guesses: list[str] = field(default_factory=list)


def _looks_uniform(info: dict[str, Any]) -> bool:
    """A uniform draw has std = range / sqrt(12); a normal one of many samples spans far more
    than that (about 9 std for a million samples), so the ratio tells them apart."""
    spread = (info["max"] - info["min"]) / math.sqrt(12)
    return info.get("numel", 0) >= 256 and spread > 0 and abs(info["std"] / spread - 1) < 0.05


def _tensor_spec(i: int, info: dict[str, Any], constants: dict[str, Any],
                 d: _Derivation) -> dict[str, Any]:
    dtype = info["dtype"]
    if dtype not in DTYPES:
        raise BadInputError(f"get_inputs() item {i} has dtype {dtype!r}",
                            fix=f"kopt cases take one of {sorted(set(DTYPES.values()))}")
    spec: dict[str, Any] = {"shape": info["shape"], "dtype": dtype}
    if info["transposed"]:
        spec["contiguous"] = False
        d.guesses.append(f"arg {i} is a transposed view and stays one")
    elif not info["contiguous"]:
        d.guesses.append(f"arg {i} is a non-contiguous view; it is drawn contiguous")
    if "min" not in info and "p" not in info:  # empty tensor
        return spec
    if dtype == "bool":
        spec.update(init="bernoulli", p=_round(info["p"]))
    elif isinstance(info["min"], int) and dtype != "bool":
        low = 0 if info["min"] >= 0 else info["min"]
        high = info["max"] + 1
        bounds = sorted((v, k) for k, v in constants.items() if isinstance(v, int)
                        and _COUNT_NAME.search(k) and high <= v <= 4 * high)
        how = f"observed values {info['min']}..{info['max']}"
        if bounds:
            high, name = bounds[0]
            how += f", bounded by {name}={high}"
        spec.update(init="randint", low=low, high=high)
        d.guesses.append(f"arg {i}: integers in [{low}, {high}) ({how})")
    elif info["min"] == info["max"] and info["min"] in (0.0, 1.0):
        spec["init"] = "zeros" if info["min"] == 0.0 else "ones"
        d.guesses.append(f"arg {i}: all {spec['init']}")
    elif _looks_uniform(info):
        # Bounds to a hundredth of the range: rand() * 4 - 2 observes -1.9998..1.9999 -> [-2, 2).
        step = 10.0 ** (math.floor(math.log10(info["max"] - info["min"])) - 2)
        low, high = (round(round(v / step) * step, 10) for v in (info["min"], info["max"]))
        spec.update(init="uniform", low=low, high=high)
        d.guesses.append(f"arg {i}: uniform in [{low}, {high})")
    else:
        spec["init"] = "normal"
        if abs(info["mean"]) > 0.05:
            spec["mean"] = _round(info["mean"])
        if abs(info["std"] - 1.0) > 0.05:
            spec["std"] = _round(info["std"])
        if "mean" in spec or "std" in spec:
            d.guesses.append(f"arg {i}: normal(mean={spec.get('mean', 0.0)}, "
                             f"std={spec.get('std', 1.0)})")
    return spec


@dataclass
class _Sizes:
    """What smoke sizing works from: the main tensor shapes and the constructor's ints."""

    shapes: list[list[int]]
    ctor_ints: set[int]
    shrink_ctor: bool
    """Constructor ints may shrink with the inputs (they are named arguments)."""
    pinned: set[int]
    """Sizes that never shrink (positional constructor arguments kopt cannot rename)."""
    batch: int | None
    """Dim 0 of the first tensor input with two or more dims: shrunk first."""
    ties: dict[int, tuple[int, int]] = field(default_factory=dict)
    """Derived size -> (base size, factor): inputs of one rank whose sizes at the same dim
    differ by an integer factor (`D` and `D * stride`) keep that factor in smoke."""

    def __post_init__(self) -> None:
        for a in self.shapes:
            for b in self.shapes:
                if len(a) != len(b) or len(a) < 3:
                    continue
                for small, big in zip(a[2:], b[2:], strict=True):  # spatial dims only
                    if small < big and big % small == 0 and big not in self.ties \
                            and small not in self.ties:
                        self.ties[big] = (small, big // small)

    def tie(self, sizes: dict[int, int]) -> dict[int, int]:
        """`sizes` with every derived size set from its base."""
        out = {k: v for k, v in sizes.items() if k not in self.ties}
        for big, (small, k) in self.ties.items():
            if small in out:
                out[big] = out[small] * k
        return out

    def shrinkable(self) -> set[int]:
        values = {s for shape in self.shapes for s in shape}
        if self.shrink_ctor:
            values |= self.ctor_ints
        return {v for v in values if v >= 2 * SMOKE_MIN and v not in self.pinned
                and v not in self.ties} | (
            {self.batch} if self.batch and self.batch > 2 and self.batch not in self.pinned
            and self.batch not in self.ties else set())

    def divisor(self, v: int, sizes: dict[int, int]) -> int:
        """What v's smoke size must be a multiple of: every constructor int that divides v
        (group counts, heads), at its own smoke size."""
        need = 1
        if v == self.batch and v not in self.ctor_ints:
            return need  # a batch that no constructor argument names divides nothing
        for g in self.ctor_ints:
            if 2 <= g < v and v % g == 0:
                need = math.lcm(need, sizes.get(g, g))
        return need

    def floor(self, v: int, sizes: dict[int, int]) -> int:
        """The least smoke size of v: 2 for a batch (that is no other size); else SMOKE_MIN, and no less than a
        small constructor int that v was at least (a kernel or pool size stays <= a spatial size)."""
        if v == self.batch and not any(v in shape[1:] for shape in self.shapes):
            return 2  # a batch that is no other size of the inputs
        small = [sizes.get(g, g) for g in self.ctor_ints if g < v and g <= SMOKE_KERNEL_MAX]
        return min(v, max([SMOKE_MIN, *small]))

    def halve(self, v: int, sizes: dict[int, int]) -> int | None:
        """v's next smaller smoke size (about half), or None when it cannot shrink."""
        cur = sizes.get(v, v)
        need = self.divisor(v, sizes)
        new = (cur // 2) // need * need
        if new < max(need, self.floor(v, sizes)) or new >= cur:
            return None
        return new


def _initial_sizes(sz: _Sizes, scale: int) -> dict[int, int]:
    """Original size -> smoke size: sizes above SMOKE_DIM take SMOKE_SIZES (times `scale`) in
    order of appearance, equal sizes together, rounded to what their divisors need; then the
    inputs shrink to SMOKE_MAX_NUMEL elements, batch first."""
    order: list[int] = []
    for s in [s for shape in sz.shapes for s in shape] + sorted(sz.ctor_ints if sz.shrink_ctor else ()):
        if s > SMOKE_DIM * scale and s not in sz.pinned and s not in order and s not in sz.ties:
            order.append(s)
    targets = {v: SMOKE_SIZES[i % len(SMOKE_SIZES)] * scale for i, v in enumerate(order)}
    sizes: dict[int, int] = {}
    for v in sorted(order):  # divisors first: their smoke sizes decide their multiples'
        need = sz.divisor(v, sizes)
        t = targets[v]
        if need == 1 and v % 16:
            t -= 3  # the odd twin keeps ragged edges ragged
        s = max(sz.floor(v, sizes), need * max(1, round(t / need)))
        if s < v:
            sizes[v] = s
    sizes = sz.tie(sizes)
    return _shrink(sizes, sz, lambda sizes: max(
        (math.prod(sizes.get(s, s) for s in shape) for shape in sz.shapes), default=0),
        SMOKE_MAX_NUMEL * scale * scale, prefer=max(sz.shapes, key=math.prod, default=[]))


def _shrink(sizes: dict[int, int], sz: _Sizes, measure: Any, budget: int,
            prefer: list[int], exact: bool = True) -> dict[int, int]:
    """Halve sizes until `measure(sizes)` is within `budget` (not `exact`: measured once, then
    estimated as shrinking with each halving): the batch first, then the largest of `prefer`
    (dims of the tensor over budget), then any size."""
    sizes = dict(sizes)
    estimate = float(measure(sizes))
    while (estimate := float(measure(sizes)) if exact else estimate) > budget:
        shrinkable = sz.shrinkable()
        current = {v: sizes.get(v, v) for v in shrinkable}
        wanted = {k for d in prefer for k, v in sizes.items() if v == d}
        wanted = (wanted | {d for d in prefer if d not in sizes}) & shrinkable
        order = ([sz.batch] if sz.batch in shrinkable else []) + \
            sorted(wanted, key=lambda v: -current[v]) + sorted(shrinkable, key=lambda v: -current[v])
        for v in order:
            new = sz.halve(v, sizes)
            if new is not None:
                estimate *= new / current[v]
                sizes[v] = new
                sizes = sz.tie(sizes)
                break
        else:
            break
    return sizes


@dataclass
class SmokeTrial:
    """One smoke sizing, built and run: did it work, and how large did the forward get?"""

    strategy: str
    sizes: dict[int, int]
    ok: bool = False
    stage: str = ""
    """Where it failed: `constructor`, `inputs` or `forward` ('' when it ran)."""
    error: str = ""
    largest: int = 0
    """Elements of the largest tensor any op produced."""
    shape: list[int] = field(default_factory=list)
    op: str = ""
    seconds: float = 0.0

    def summary(self) -> str:
        sizes = ", ".join(f"{k}->{v}" for k, v in sorted(self.sizes.items())) or "none shrunk"
        if not self.ok:
            return f"{self.strategy} ({sizes}): {self.stage} failed: {self.error}"
        return (f"{self.strategy} ({sizes}): largest op output {self.largest} elements "
                f"{self.shape} ({self.op})")


def _smoke_override(sizes: dict[int, int], d: _Derivation, init: list[Any],
                    names: list[str] | None, batch: tuple[int, int] | None = None
                    ) -> dict[str, Any]:
    """The smoke set's overrides: each size of `sizes` wherever it appears; with `batch`
    (size, smoke size), dim 0 of every input of two or more dims that has that size, by
    position (its other occurrences keep their sizes)."""
    args: list[dict[str, Any]] = []
    for a in d.args:
        if "shape" not in a:
            args.append({})
            continue
        shape = [sizes.get(s, s) for s in a["shape"]]
        if batch is not None and len(shape) >= 2 and a["shape"][0] == batch[0]:
            shape[0] = batch[1]
        over: dict[str, Any] = {"shape": shape}
        if a.get("init") == "randint" and a["high"] in sizes:
            over["high"] = sizes[a["high"]]
        args.append(over)
    smoke: dict[str, Any] = {"args": args}
    if names is not None and init:
        kwargs = dict(zip(names, init, strict=True))
        changed = {k: _remap(v, sizes) for k, v in kwargs.items() if _remap(v, sizes) != v}
        if changed:
            smoke["init_kwargs"] = changed
    return smoke


def try_smoke(file: Path, manifest: dict[str, Any], strategy: str,
              sizes: dict[int, int]) -> SmokeTrial:
    """Build the manifest's smoke model (seeded default weights) and run one smoke forward on
    its smoke inputs, recording the largest tensor any op produced (harness.memory)."""
    import time

    import torch

    from kopt.harness.case import Case, parse_manifest
    from kopt.harness.data import (
        agent_provide_inputs,
        instantiate,
        model_class,
        seeded_cpu_generator,
    )
    from kopt.harness.memory import largest_op_output

    trial = SmokeTrial(strategy, dict(sizes))
    t0 = time.perf_counter()
    data = {**manifest, "model": {**manifest["model"], "module": file.name}}
    case = Case(file.parent, parse_manifest(data, file))
    resolved = case.input_set("smoke")
    stage = "constructor"
    try:
        cls = model_class(case)
        with seeded_cpu_generator(0):
            model = instantiate(cls, resolved, file).eval()
            stage = "inputs"
            inputs = agent_provide_inputs(case, "smoke", cache=False)
            stage = "forward"
            with torch.no_grad():
                _, trial.largest, trial.shape, trial.op = largest_op_output(
                    lambda: model(*inputs.args, **inputs.kwargs))
        trial.ok = True
    except Exception as err:  # user code: any failure rejects this sizing
        cause = err.__cause__ if isinstance(err, CaseError) and err.__cause__ else err
        trial.stage, trial.error = stage, f"{type(cause).__name__}: {str(cause)[:200]}"
    trial.op = trial.op.removeprefix("aten.")
    trial.seconds = time.perf_counter() - t0
    return trial


# Strategies tried in order until one sizing runs within SMOKE_OP_BUDGET.
_STRATEGIES = (
    ("shrink inputs and constructor sizes", 1, True),
    ("shrink less", 2, True),
    ("keep constructor sizes", 1, False),
)


def search_smoke(file: Path, manifest: dict[str, Any], d: _Derivation, sz: _Sizes,
                 init: list[Any], names: list[str] | None
                 ) -> tuple[dict[str, Any] | None, SmokeTrial | None, list[SmokeTrial]]:
    """The first sizing whose smoke model builds and runs with no op output above
    SMOKE_OP_BUDGET elements (over budget: shrink again, batch first; failed: the next
    strategy); else the smallest one that ran; else None. Every sizing returned has run."""
    trials: list[SmokeTrial] = []
    tried: set[tuple[tuple[tuple[int, int], ...], tuple[int, int] | None]] = set()
    smokes: dict[int, dict[str, Any]] = {}

    def attempt(strategy: str, sizes: dict[int, int],
                batch: tuple[int, int] | None = None) -> SmokeTrial | None:
        key = (tuple(sorted(sizes.items())), batch)
        if key in tried or len(trials) >= SMOKE_TRIALS:
            return None
        tried.add(key)
        smoke = _smoke_override(sizes, d, init, names, batch)
        trial = try_smoke(file, {**manifest, "smoke": smoke}, strategy, sizes)
        if batch is not None:
            trial.strategy += f" (batch {batch[0]}->{batch[1]} at dim 0 only)"
        smokes[id(trial)] = smoke
        trials.append(trial)
        return trial

    def shrink_within_budget(strategy: str, local: _Sizes, scale: int,
                             batch: tuple[int, int] | None = None) -> SmokeTrial | None:
        """`local`'s initial sizing, shrunk again while it runs over SMOKE_OP_BUDGET: the
        trial that ran within it, else None."""
        sizes = _initial_sizes(local, scale)
        trial = attempt(strategy, sizes, batch)
        while trial is not None and trial.ok and trial.largest > SMOKE_OP_BUDGET:
            smaller = _shrink(sizes, local, lambda s, t=trial: t.largest, SMOKE_OP_BUDGET,
                              prefer=trial.shape, exact=False)
            if smaller == sizes:
                break
            sizes = smaller
            trial = attempt(strategy, sizes, batch)
        return trial if trial is not None and trial.ok and trial.largest <= SMOKE_OP_BUDGET else None

    for strategy, scale, shrink_ctor in _STRATEGIES:
        if shrink_ctor and not sz.shrink_ctor:
            continue
        local = _Sizes(sz.shapes, sz.ctor_ints, shrink_ctor, sz.pinned | (
            set() if shrink_ctor else sz.ctor_ints), sz.batch)
        trial = shrink_within_budget(strategy, local, scale)
        if trial is not None:
            return smokes[id(trial)], trial, trials
    # Sizes are shrunk by value, so a batch equal to a size the model ties to its weights (a
    # LayerNorm over a last dim that happens to equal the batch) breaks every sizing above:
    # shrink the batch by position, and the sizes that are not the batch's by value.
    if sz.batch and sz.batch > 2 and sz.batch not in sz.pinned:
        local = _Sizes(sz.shapes, sz.ctor_ints, False, sz.pinned | sz.ctor_ints | {sz.batch},
                       None)
        trial = shrink_within_budget("keep the batch's other sizes", local, 1, (sz.batch, 2))
        if trial is not None:
            return smokes[id(trial)], trial, trials
    if not any(t.ok for t in trials) and sz.batch and sz.batch > 2:
        # a model whose sizes are all fixed by its weights (a classifier over 512 * 7 * 7
        # features needs 224x224 images): the file's sizes with a batch of 2, over budget
        trial = attempt("shrink the batch alone", {}, (sz.batch, 2))
    ran = [t for t in trials if t.ok]
    if ran:
        best = min(ran, key=lambda t: t.largest)
        best = shrink_by_position(
            best, smokes[id(best)], smokes, trials,
            lambda smoke, label: try_smoke(file, {**manifest, "smoke": smoke}, label, best.sizes))
        return smokes[id(best)], best, trials
    return None, None, trials


def shrink_by_position(best: SmokeTrial, smoke: dict[str, Any],
                       smokes: dict[int, dict[str, Any]], trials: list[SmokeTrial],
                       run: Callable[[dict[str, Any], str], SmokeTrial]) -> SmokeTrial:
    """`best` (a sizing that ran over budget) shrunk further one input dim at a time, by
    position: the largest dim of the largest input first, each step kept only when the smoke
    model still runs and its largest op output drops; a dim that failed is not tried again.
    Returns the last sizing kept (`best` when no step helped); every step tried joins
    `trials`."""
    import copy

    failed: set[tuple[int, int]] = set()
    spent = 0
    while best.largest > SMOKE_OP_BUDGET and spent < SMOKE_POSITION_TRIALS:
        args = smoke["args"]
        dims = [(math.prod(a["shape"]), i, dim, size) for i, a in enumerate(args)
                if a.get("shape") for dim, size in enumerate(a["shape"])]
        dims = sorted(((-numel, -size, i, dim, size) for numel, i, dim, size in dims
                       if (i, dim) not in failed and size > SMOKE_MIN))
        if not dims:
            break
        _n, _s, i, dim, size = dims[0]
        need = best.largest / SMOKE_OP_BUDGET
        new = max(SMOKE_MIN, size // (4 if need >= 4 and size // 4 >= SMOKE_MIN else 2))
        trial_smoke = copy.deepcopy(smoke)
        trial_smoke["args"][i]["shape"][dim] = new
        trial = run(trial_smoke, f"{best.strategy}; input {i} dim {dim} {size}->{new} by position")
        spent += 1
        smokes[id(trial)] = trial_smoke
        trials.append(trial)
        if trial.ok and trial.largest < best.largest:
            best, smoke = trial, trial_smoke
        else:
            failed.add((i, dim))
    return best


@dataclass
class SmokeReport:
    """How the smoke set was chosen: every sizing tried, and the one kept (None: no smoke set)."""

    trials: list[SmokeTrial]
    chosen: SmokeTrial | None

    @property
    def within_budget(self) -> bool:
        return self.chosen is not None and self.chosen.largest <= SMOKE_OP_BUDGET

    def warning(self) -> str:
        """A line for the terminal when the smoke set is missing or over budget, else ''."""
        if self.chosen is None:
            last = self.trials[-1].summary() if self.trials else "nothing to try"
            return f"no smoke set: none of {len(self.trials)} sizing(s) built and ran ({last})"
        if not self.within_budget:
            return (f"the smoke set is over budget ({self.chosen.largest} elements in one op "
                    f"output > {SMOKE_OP_BUDGET}): CPU runs of this case will be slow")
        return ""

    def to_dict(self) -> dict[str, Any]:
        return {"within_budget": self.within_budget, "warning": self.warning(),
                "chosen": self.chosen.summary() if self.chosen else None,
                "trials": [t.summary() for t in self.trials]}


def derive_manifest(result: dict[str, Any], name: str, file: Path) -> dict[str, Any]:
    """manifest.yaml's contents for a probed KernelBench file (see `derive_case`)."""
    return derive_case(result, name, file)[0]


def derive_case(result: dict[str, Any], name: str, file: Path
                ) -> tuple[dict[str, Any], SmokeReport]:
    """manifest.yaml's contents for a probed file, with a smoke set that was built and run
    here (`try_smoke`: call this where the user's code may run), and how it was chosen."""
    d = _Derivation()
    constants = result["constants"]
    infos = result["inputs"]
    for i, info in enumerate(infos):
        if info["kind"] == "tensor":
            d.args.append(_tensor_spec(i, info, constants, d))
        else:
            d.args.append({"value": info["value"]})
    init, names = result["init"], result["init_names"]
    shapes = [a["shape"] for a in d.args if "shape" in a]
    init_ints = set(_ints_in(init))
    kept = {v for v in init_ints if not sizes_anything(v, shapes + result["state_shapes"])
            } if "state_shapes" in result else set()
    if kept:
        d.guesses.append(f"constructor values {sorted(kept)} kept in smoke: no input or "
                         "weight size is, divides or is divided by them (not sizes)")
    batch = next((s[0] for s in shapes if len(s) >= 2), None)
    if names is not None:
        sz = _Sizes(shapes, init_ints, True, kept, batch)
    else:
        pinned = {v for v in init_ints if any(v in s for s in shapes)} | kept
        sz = _Sizes(shapes, init_ints, False, pinned, batch)
        if pinned & {s for shape in shapes for s in shape if s > SMOKE_DIM}:
            d.guesses.append(f"sizes {sorted(pinned)} kept in smoke: they are positional "
                             "constructor arguments kopt cannot rename")

    model: dict[str, Any] = {"module": "model.py", "class": result.get("class", "Model")}
    if names is not None and init:
        model["init_kwargs"] = dict(zip(names, init, strict=True))
    elif init:
        model["init_args"] = init
    manifest: dict[str, Any] = {"name": name, "description": "", "model": model,
                                "inputs": {"args": d.args, "kwargs": {}}, "device": "auto",
                                "precision": "strict"}
    smoke, chosen, trials = search_smoke(file, manifest, d, sz, init, names)
    smoke_note = _smoke_note(chosen, trials)
    for i, a in enumerate(d.args):
        if "shape" not in a and type(a["value"]) is int and chosen and a["value"] in chosen.sizes:
            d.guesses.append(f"arg {i} = {a['value']} equals a shrunk size but is kept "
                             "in smoke (a plain value, not a size kopt can see)")

    consts = ", ".join(f"{k}={v}" for k, v in constants.items())
    origin = result.get("origin") or f"Imported from KernelBench file {file.name}."
    manifest["description"] = " ".join(filter(None, [
        origin,
        result["doc"],
        f"Constants: {consts}." if consts else "",
        "Guessed by kopt import-kernelbench (check them): " + "; ".join(d.guesses) + "."
        if d.guesses else "",
        smoke_note,
        "precision: strict (float32 matmuls are compared without TF32; set tf32 if acceptable)."
        if any(a.get("dtype") == "float32" for a in d.args) else "",
    ]))
    if smoke is not None:
        manifest["smoke"] = smoke
    return manifest, SmokeReport(trials, chosen)


def _smoke_note(chosen: SmokeTrial | None, trials: list[SmokeTrial]) -> str:
    """The description's sentence on the smoke set: sizes chosen and why, or why none."""
    if chosen is None:
        why = trials[-1].summary() if trials else "no sizing to try"
        return (f"NO SMOKE SET: no smoke sizing of {len(trials)} tried built and ran ({why}); "
                "CPU runs use the main inputs.")
    sizes = ", ".join(f"{k}->{v}" for k, v in sorted(chosen.sizes.items())) or "none"
    failed = [t for t in trials if not t.ok]
    over = [t for t in trials if t.ok and t is not chosen]
    why = [f"ran in {chosen.seconds:.1f} s with the largest op output {chosen.largest} elements "
           f"{chosen.shape} ({chosen.op}; budget {SMOKE_OP_BUDGET})"]
    if over:
        why.append(f"{len(over)} larger sizing(s) ran over that budget")
    if failed:
        why.append("rejected: " + "; ".join(f"{t.stage} failed with "
                                            f"{', '.join(f'{k}->{v}' for k, v in sorted(t.sizes.items()))}"
                                            f" ({t.error})" for t in failed[:3]))
    text = f"Smoke sizes {sizes} ({chosen.strategy}): " + ", ".join(why) + "."
    if chosen.largest > SMOKE_OP_BUDGET:
        text += " OVER BUDGET: no sizing tried ran within it, CPU runs of this case are slow."
    return text


# ---------------------------------------------------------------------------------------------
# Writing case directories.


class _ManifestDumper(yaml.SafeDumper):
    """Block style for mappings, flow style for lists of plain values (`shape: [64, 256]`)."""


def _represent_list(dumper: yaml.SafeDumper, data: list[Any]) -> yaml.Node:
    flat = all(not isinstance(v, (dict, list)) for v in data)
    return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=flat)


def _represent_dict(dumper: yaml.SafeDumper, data: dict[str, Any]) -> yaml.Node:
    # A tensor spec reads best on one line: {shape: [64, 256], dtype: float32, init: normal}.
    flat = all(not isinstance(v, dict) and not (
        isinstance(v, list) and any(isinstance(x, (dict, list)) for x in v))
        for v in data.values()) and len(str(data)) < 100
    return dumper.represent_mapping("tag:yaml.org,2002:map", data, flow_style=flat)


_ManifestDumper.add_representer(list, _represent_list)
_ManifestDumper.add_representer(dict, _represent_dict)


def dump_manifest(manifest: dict[str, Any]) -> str:
    """YAML text of a manifest, laid out like the bundled cases."""
    return yaml.dump(manifest, Dumper=_ManifestDumper, sort_keys=False, width=100)


def _case_name(name: str) -> str:
    if not name or not all(c.isalnum() or c in "_-" for c in name):
        raise BadInputError(f"case name {name!r} is not allowed",
                            fix="use letters, digits, '_' and '-' only")
    return name


def _fresh_dir(out: Path, another: str = "another NAME") -> Path:
    """`out`, resolved, after checking it holds no case yet (it is created by the writer)."""
    out = out.expanduser().resolve()
    if (out / MANIFEST_NAME).exists() or (out / "model.py").exists():
        raise BadInputError(f"{out} already holds a case",
                            fix=f"pass --out DIR or {another}, or remove that directory")
    return out


def write_case(file: Path, manifest: dict[str, Any], out_dir: Path, *,
               command: str | None = None) -> Path:
    """Write `file` unmodified as model.py and `manifest` as manifest.yaml; check it loads."""
    out_dir.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(file, out_dir / "model.py")
    header = f"# Written by `{command or 'kopt import-kernelbench ' + file.name}`; edit freely.\n"
    (out_dir / MANIFEST_NAME).write_text(header + dump_manifest(manifest))
    try:
        load_case_dir(out_dir)
    except CaseError as err:  # a bug in the derivation, not the user's file
        raise BadInputError(f"{file}: the derived manifest does not load: {err.one_line()}",
                            fix="report this, and edit the manifest by hand") from None
    return out_dir


def import_kernelbench(file: str | Path, *, name: str | None = None,
                       out: str | Path | None = None, class_name: str = "Model",
                       inputs: str | None = None, command: str | None = None,
                       report: dict[str, Any] | None = None, warm: bool = False) -> Path:
    """Turn a KernelBench problem file (or any file with an nn.Module `class_name` and example
    inputs from its get_inputs() or `inputs` shapes) into a case directory; returns it.
    The smoke set was built and run before anything is written; `report`, when given, is
    filled with how it was chosen (`SmokeReport.to_dict()`)."""
    file = Path(file).expanduser().resolve()
    if not file.is_file():
        raise BadInputError(f"{file}: no such file",
                            fix="pass a KernelBench .py file defining Model, get_inputs() and "
                                "get_init_inputs()")
    if inputs is not None:
        parse_input_shapes(inputs)  # bad input fails here, before the subprocess
    default = file.stem if class_name == "Model" else f"{file.stem}_{class_name}"
    name = _case_name(name or re.sub(r"[^A-Za-z0-9_-]", "_", default))
    out_dir = _fresh_dir(Path(out) if out is not None else user_cases_dir() / name,
                         "--name NAME" if command is None else "another NAME")
    origin = f"Made by `{command}`." if command else None
    manifest, smoke = _run_probe(file, name, class_name, inputs, origin, warm=warm)
    if report is not None:
        report.update(smoke)
    return write_case(file, manifest, out_dir, command=command)


def scaffold_case(name: str, out: str | Path | None = None) -> Path:
    """A new case directory from harness/templates/ (a case that loads and runs as is)."""
    name = _case_name(name)
    out_dir = _fresh_dir(Path(out) if out is not None else user_cases_dir() / name)
    out_dir.mkdir(parents=True, exist_ok=True)
    for template in sorted(TEMPLATES_DIR.glob("*.tmpl")):
        text = string.Template(template.read_text()).substitute(name=name)
        (out_dir / template.name.removesuffix(".tmpl")).write_text(text)
    return out_dir


if __name__ == "__main__":  # the probe subprocess: one JSON line on stdout
    import torch

    if not torch.cuda.is_available():  # KernelBench files often call .cuda() on their inputs
        torch.Tensor.cuda = lambda self, *a, **k: self  # type: ignore[method-assign]
    if sys.argv[1] == "--standby":  # imports done; wait for the file (see _ProbeStandby)
        import kopt.harness.data  # noqa: F401
        import kopt.harness.memory  # noqa: F401

        line = sys.stdin.readline()
        if not line.strip():
            sys.exit(0)
        job = json.loads(line)
        os.chdir(Path(job["file"]).parent)
        sys.argv[1:] = [job["file"], json.dumps(job["request"])]
    try:
        outcome = _subprocess_main(Path(sys.argv[1]),
                                   json.loads(sys.argv[2]) if len(sys.argv) > 2 else {"name": "case"})
    except BadInputError as err:
        outcome = {"ok": False, "error": err.message if hasattr(err, "message") else str(err),
                   "fix": getattr(err, "fix", None)}
    sys.stdout.flush()
    print(json.dumps(outcome))
