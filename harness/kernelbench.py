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


def _describe_tensor(t: Any) -> dict[str, Any]:
    import torch

    x = t.detach().cpu()
    info: dict[str, Any] = {"kind": "tensor", "shape": list(x.shape),
                            "dtype": str(x.dtype).removeprefix("torch."),
                            "contiguous": x.is_contiguous(), "transposed": False}
    if not x.is_contiguous() and x.dim() >= 2 and x.transpose(-1, -2).is_contiguous():
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


def probe(file: Path) -> dict[str, Any]:
    """Import `file`, call get_init_inputs()/get_inputs(), describe what they return."""
    import importlib.util

    import torch

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
    cls = getattr(module, "Model", None)
    if not (isinstance(cls, type) and issubclass(cls, torch.nn.Module)):
        return fail("defines no `class Model(nn.Module)`", "a KernelBench file names its module Model")
    if not callable(getattr(module, "get_inputs", None)):
        return fail("defines no get_inputs()", "add get_inputs() returning the forward's arguments")
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
        torch.manual_seed(seed)
        try:
            drawn = module.get_inputs()
        except BaseException as err:
            return fail(f"get_inputs() raised {type(err).__name__}: {err}",
                        "fix get_inputs() so that it returns the forward's arguments")
        if not isinstance(drawn, (list, tuple)):
            return fail(f"get_inputs() returned a {type(drawn).__name__}, not a list",
                        "return a list of the forward's arguments, e.g. [x]")
        for i, value in enumerate(drawn):
            if seed > 0:  # later draws only widen integer ranges
                if isinstance(value, torch.Tensor) and isinstance(inputs[i].get("min"), int):
                    other = _describe_tensor(value)
                    inputs[i]["min"] = min(inputs[i]["min"], other["min"])
                    inputs[i]["max"] = max(inputs[i]["max"], other["max"])
            elif isinstance(value, torch.Tensor):
                inputs.append(_describe_tensor(value))
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
    except (TypeError, ValueError):
        names = None
    try:
        with torch.device("meta"):
            cls(*init)
    except BaseException:
        try:
            cls(*init)
        except BaseException as err:
            return fail(f"Model(*get_init_inputs()) raised {type(err).__name__}: {err}",
                        "make get_init_inputs() match Model's constructor")
    constants = {k: v for k, v in vars(module).items()
                 if not k.startswith("_") and type(v) in (int, float)}
    doc = inspect.getdoc(cls) or ""
    return {"ok": True, "inputs": inputs, "init": init_json, "init_names": names,
            "constants": constants, "doc": doc.strip().splitlines()[0] if doc.strip() else ""}


def _run_probe(file: Path) -> dict[str, Any]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(import_root()), env.get("PYTHONPATH", "")])
    try:
        proc = subprocess.run([sys.executable, "-m", "kopt.harness.kernelbench", str(file)],
                              capture_output=True, text=True, timeout=PROBE_TIMEOUT_S, env=env,
                              cwd=str(file.parent))
    except subprocess.TimeoutExpired:
        raise BadInputError(f"{file}: get_inputs() did not finish within {PROBE_TIMEOUT_S} s",
                            fix="make the problem's sizes smaller") from None
    lines = proc.stdout.strip().splitlines()
    try:
        result = json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise BadInputError(f"{file}: importing it crashed (exit {proc.returncode}: {tail})",
                            fix=f"run `python {file}` to see why") from None
    if not result.get("ok"):
        raise BadInputError(f"{file}: {result['error']}", fix=result.get("fix"))
    return result


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


def _smoke_sizes(shapes: list[list[int]], pinned: set[int], extra: set[int]) -> dict[int, int]:
    """Original size -> smoke size; equal sizes map to equal sizes, pinned sizes stay."""
    large = [s for shape in shapes for s in shape] + sorted(extra)
    sizes: dict[int, int] = {}
    for s in large:
        if s > SMOKE_DIM and s not in pinned and s not in sizes:
            target = SMOKE_SIZES[len(sizes) % len(SMOKE_SIZES)]
            sizes[s] = target if s % 16 == 0 else target - 3
    while True:
        biggest = max((math.prod(sizes.get(s, s) for s in shape) for shape in shapes), default=0)
        if biggest <= SMOKE_MAX_NUMEL:
            return sizes
        free = [s for shape in shapes for s in shape if s not in pinned and sizes.get(s, s) > 8]
        if not free:
            return sizes
        s = max(free, key=lambda v: sizes.get(v, v))
        sizes[s] = sizes.get(s, s) // 2


def derive_manifest(result: dict[str, Any], name: str, file: Path) -> dict[str, Any]:
    """manifest.yaml's contents for a probed KernelBench file."""
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
    if names is not None:
        pinned: set[int] = set()
        # Large constructor ints are sizes (in_features, vocab_size, ...): shrink them too.
        sizes = _smoke_sizes(shapes, pinned, {v for v in init_ints if v > SMOKE_DIM})
    else:
        pinned = {v for v in init_ints if any(v in s for s in shapes)}
        sizes = _smoke_sizes(shapes, pinned, set())
        if pinned & {s for shape in shapes for s in shape if s > SMOKE_DIM}:
            d.guesses.append(f"sizes {sorted(pinned)} kept in smoke: they are positional "
                             "constructor arguments kopt cannot rename")
    for i, a in enumerate(d.args):
        if "shape" not in a:
            if type(a["value"]) is int and a["value"] in sizes:
                d.guesses.append(f"arg {i} = {a['value']} equals a shrunk size but is kept "
                                 "in smoke (a plain value, not a size kopt can see)")
            d.smoke_args.append({})
            continue
        over: dict[str, Any] = {"shape": [sizes.get(s, s) for s in a["shape"]]}
        if a.get("init") == "randint" and a["high"] in sizes:
            over["high"] = sizes[a["high"]]
        d.smoke_args.append(over)
    if sizes:
        d.guesses.append("smoke shrinks sizes " + ", ".join(f"{k}->{v}" for k, v in sizes.items())
                         + " (equal sizes together)")

    model: dict[str, Any] = {"module": "model.py", "class": "Model"}
    smoke: dict[str, Any] = {"args": d.smoke_args}
    if names is not None and init:
        model["init_kwargs"] = dict(zip(names, init, strict=True))
        smoke_init = {k: _remap(v, sizes) for k, v in model["init_kwargs"].items()}
        changed = {k: v for k, v in smoke_init.items() if v != model["init_kwargs"][k]}
        if changed:
            smoke["init_kwargs"] = changed
    elif init:
        model["init_args"] = init

    consts = ", ".join(f"{k}={v}" for k, v in constants.items())
    description = " ".join(filter(None, [
        f"Imported from KernelBench file {file.name}.",
        result["doc"],
        f"Constants: {consts}." if consts else "",
        "Guessed by kopt import-kernelbench (check them): " + "; ".join(d.guesses) + "."
        if d.guesses else "",
        "precision: strict (float32 matmuls are compared without TF32; set tf32 if acceptable)."
        if any(a.get("dtype") == "float32" for a in d.args) else "",
    ]))
    return {"name": name, "description": description, "model": model,
            "inputs": {"args": d.args, "kwargs": {}}, "device": "auto",
            "precision": "strict", "smoke": smoke}


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


def _fresh_dir(out: Path) -> Path:
    """`out`, resolved, after checking it holds no case yet (it is created by the writer)."""
    out = out.expanduser().resolve()
    if (out / MANIFEST_NAME).exists() or (out / "model.py").exists():
        raise BadInputError(f"{out} already holds a case",
                            fix="pass --out DIR or --name NAME, or remove that directory")
    return out


def write_case(file: Path, manifest: dict[str, Any], out_dir: Path) -> Path:
    """Write `file` unmodified as model.py and `manifest` as manifest.yaml; check it loads."""
    out_dir.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(file, out_dir / "model.py")
    header = f"# Written by `kopt import-kernelbench {file.name}`; edit freely.\n"
    (out_dir / MANIFEST_NAME).write_text(header + dump_manifest(manifest))
    try:
        load_case_dir(out_dir)
    except CaseError as err:  # a bug in the derivation, not the user's file
        raise BadInputError(f"{file}: the derived manifest does not load: {err.one_line()}",
                            fix="report this, and edit the manifest by hand") from None
    return out_dir


def import_kernelbench(file: str | Path, *, name: str | None = None,
                       out: str | Path | None = None) -> Path:
    """Turn a KernelBench problem file into a case directory; returns that directory."""
    file = Path(file).expanduser().resolve()
    if not file.is_file():
        raise BadInputError(f"{file}: no such file",
                            fix="pass a KernelBench .py file defining Model, get_inputs() and "
                                "get_init_inputs()")
    name = _case_name(name or re.sub(r"[^A-Za-z0-9_-]", "_", file.stem))
    out_dir = _fresh_dir(Path(out) if out is not None else user_cases_dir() / name)
    result = _run_probe(file)
    return write_case(file, derive_manifest(result, name, file), out_dir)


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
    outcome = probe(Path(sys.argv[1]))
    sys.stdout.flush()
    print(json.dumps(outcome))
