"""Cases: `cases/<name>/manifest.yaml` + `model.py`, loaded into a validated `Case`.

The manifest format is docs/CASES.md's "Case (input contract)". Every field of docs/CASES.md's example
loads exactly as written; unknown keys are rejected; an error names the file, the key, what
was expected and what was found.

Input sets have names: `main` (the manifest's `inputs`), `smoke` (small inputs for the CPU
interpreter) and `shape0`, `shape1`, ... (the `shapes` entries). A `smoke` or `shapes` entry
overrides the main inputs argument by argument (only the keys it sets), and may set its own
`init_kwargs` where the model's size must follow the inputs (e.g. `hidden` of a LayerNorm).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from kopt.harness.errors import CaseError, UnknownCaseError
from kopt.harness.paths import bundled_cases_dir, user_cases_dir

MANIFEST_NAME = "manifest.yaml"

# Canonical dtype names, and the aliases a user may write for them.
DTYPES: dict[str, str] = {
    "float32": "float32",
    "float": "float32",
    "fp32": "float32",
    "float16": "float16",
    "half": "float16",
    "fp16": "float16",
    "bfloat16": "bfloat16",
    "bf16": "bfloat16",
    "float64": "float64",
    "double": "float64",
    "int64": "int64",
    "long": "int64",
    "int32": "int32",
    "int": "int32",
    "int16": "int16",
    "int8": "int8",
    "uint8": "uint8",
    "bool": "bool",
}
INT_DTYPES = {"int64", "int32", "int16", "int8", "uint8"}
FLOAT_DTYPES = {"float32", "float16", "bfloat16", "float64"}

Init = Literal["normal", "uniform", "randint", "ones", "zeros", "bernoulli"]
INITS = ("normal", "uniform", "randint", "ones", "zeros", "bernoulli")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)


def _canonical_dtype(value: str) -> str:
    if value not in DTYPES:
        raise ValueError(
            f"expected a dtype, one of {', '.join(repr(d) for d in sorted(set(DTYPES.values())))}"
        )
    return DTYPES[value]


class TensorSpec(_Strict):
    """One tensor input, synthesized from a seed."""

    shape: list[int]
    """Size of each dimension; every size >= 0."""
    dtype: str = "float32"
    """Element type: float32, float16, bfloat16, float64, int64, int32, int16, int8, uint8, bool."""
    init: Init = "normal"
    """How values are drawn: normal(mean, std), uniform[low, high), randint[low, high), ones,
    zeros, bernoulli(p)."""
    mean: float = 0.0
    """Mean of `normal`."""
    std: float = 1.0
    """Standard deviation of `normal`."""
    low: float | None = None
    """Lower bound of `uniform` (default 0) or `randint` (default 0, inclusive)."""
    high: float | None = None
    """Upper bound of `uniform` (default 1) or `randint` (required for integer tensors, exclusive)."""
    p: float = 0.5
    """Probability of True/1 for `bernoulli`."""
    contiguous: bool = True
    """False: the tensor is handed over as a transposed view of its last two dims (tests
    that kernels honour strides)."""

    @field_validator("dtype")
    @classmethod
    def _dtype(cls, v: str) -> str:
        return _canonical_dtype(v)

    @field_validator("shape")
    @classmethod
    def _shape(cls, v: list[int]) -> list[int]:
        if any(d < 0 for d in v):
            raise ValueError("expected sizes >= 0")
        return v


class ScalarSpec(_Strict):
    """A non-tensor positional or keyword argument, passed as is."""

    value: Any
    """The Python value (int, float, bool, str, list)."""


class TensorOverride(_Strict):
    """A `smoke` or `shapes` entry's change to one main input: only the keys it sets."""

    shape: list[int] | None = None
    dtype: str | None = None
    init: Init | None = None
    mean: float | None = None
    std: float | None = None
    low: float | None = None
    high: float | None = None
    p: float | None = None
    contiguous: bool | None = None
    value: Any = None
    """For a scalar argument: its value in this input set."""

    @field_validator("dtype")
    @classmethod
    def _dtype(cls, v: str | None) -> str | None:
        return None if v is None else _canonical_dtype(v)


ArgSpec = TensorSpec | ScalarSpec


class InputSet(_Strict):
    """The `inputs` of a case: positional `args` and keyword `kwargs` of `forward`."""

    args: list[ArgSpec] = Field(default_factory=list)
    kwargs: dict[str, ArgSpec] = Field(default_factory=dict)


class InputOverride(_Strict):
    """A `smoke` or `shapes` entry: per-argument overrides of the main inputs."""

    args: list[TensorOverride] = Field(default_factory=list)
    kwargs: dict[str, TensorOverride] = Field(default_factory=dict)
    init_kwargs: dict[str, Any] | None = None
    """Constructor arguments for this input set, merged over the model's `init_kwargs`."""


class ModelRef(_Strict):
    """Where the baseline module lives and how to build it."""

    module: str = "model.py"
    """File (relative to the case directory) that defines the module."""
    class_name: str = Field("Model", alias="class")
    """Name of the nn.Module class in that file."""
    init_kwargs: dict[str, Any] = Field(default_factory=dict)
    """Keyword arguments of the constructor."""
    init_args: list[Any] = Field(default_factory=list)
    """Positional arguments of the constructor (KernelBench's `get_init_inputs()`)."""


class WeightsRef(_Strict):
    """An optional helper in model.py that initialises the weights: `fn(model) -> None`."""

    function: str


class Tolerance(_Strict):
    """Element-wise `|out - ref| <= atol + rtol * |ref|`, and ||out - ref|| / ||ref|| < rel."""

    atol: float
    rtol: float
    rel: float | None = None
    """Bound on the relative error; default by dtype and precision (harness.tolerance)."""


class CaseManifest(_Strict):
    """The validated contents of `manifest.yaml`."""

    name: str
    """Case name: letters, digits, '_' and '-'."""
    description: str = ""
    """What the model computes and where the pattern occurs in real models."""
    model: ModelRef = Field(default_factory=ModelRef)
    inputs: InputSet
    weights: WeightsRef | None = None
    device: Literal["cuda", "cpu", "auto"] = "auto"
    """Where the case runs; `auto` picks cuda when a GPU is present."""
    tolerance: Tolerance | None = None
    precision: Literal["strict", "tf32"] = "strict"
    """May float32 matmuls use TF32? The user's explicit choice; candidates never lower it."""
    shapes: list[InputOverride] = Field(default_factory=list)
    """Extra input sets that check generality."""
    smoke: InputOverride | None = None
    """Small inputs for CPU runs on the Triton interpreter."""
    flops: float | None = None
    """Optional FLOP count of one forward at the main inputs (else torch's counter)."""

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not v or not all(c.isalnum() or c in "_-" for c in v):
            raise ValueError("expected letters, digits, '_' and '-' only")
        return v


@dataclass(frozen=True)
class ResolvedInputSet:
    """One named input set with every override applied."""

    name: str
    args: list[ArgSpec]
    kwargs: dict[str, ArgSpec]
    init_kwargs: dict[str, Any]
    init_args: list[Any] = field(default_factory=list)

    def tensor_specs(self) -> list[TensorSpec]:
        specs = [a for a in self.args if isinstance(a, TensorSpec)]
        return specs + [v for v in self.kwargs.values() if isinstance(v, TensorSpec)]


@dataclass(frozen=True)
class Case:
    """A loaded case: its directory and validated manifest."""

    directory: Path
    manifest: CaseManifest

    @property
    def name(self) -> str:
        return self.manifest.name

    @property
    def model_file(self) -> Path:
        return self.directory / self.manifest.model.module

    @property
    def manifest_file(self) -> Path:
        return self.directory / MANIFEST_NAME

    def input_set_names(self) -> list[str]:
        names = ["main"]
        if self.manifest.smoke is not None:
            names.append("smoke")
        names += [f"shape{i}" for i in range(len(self.manifest.shapes))]
        return names

    def input_set(self, name: str) -> ResolvedInputSet:
        """The input set `name` (`main`, `smoke`, `shapeN`) with its overrides applied."""
        m = self.manifest
        base = ResolvedInputSet("main", list(m.inputs.args), dict(m.inputs.kwargs),
                                dict(m.model.init_kwargs), list(m.model.init_args))
        if name == "main":
            return base
        if name == "smoke":
            if m.smoke is None:
                raise CaseError(self.manifest_file, "this case declares no smoke inputs",
                                key="smoke", fix="add a `smoke:` entry with small shapes")
            return _apply(base, "smoke", m.smoke, self.manifest_file, "smoke")
        if name.startswith("shape") and name[5:].isdigit() and int(name[5:]) < len(m.shapes):
            i = int(name[5:])
            return _apply(base, name, m.shapes[i], self.manifest_file, f"shapes[{i}]")
        raise CaseError(self.manifest_file, f"no input set {name!r}",
                        fix=f"expected one of {', '.join(map(repr, self.input_set_names()))}")

    def verification_sets(self, on_gpu: bool) -> list[str]:
        """The input sets a verification runs: main (GPU) or smoke (CPU), plus every shape.

        On the CPU interpreter a `shapes` entry larger than the smoke inputs is still run:
        the user declared it, so its widths are checked (on as many rows as the interpreter's
        budget allows: harness.verification.draws).
        """
        first = "main" if on_gpu or self.manifest.smoke is None else "smoke"
        return [first] + [f"shape{i}" for i in range(len(self.manifest.shapes))]


def _apply(base: ResolvedInputSet, name: str, over: InputOverride, file: Path,
           key: str) -> ResolvedInputSet:
    if over.args and len(over.args) != len(base.args):
        raise CaseError(file, f"has {len(over.args)} args but inputs.args has {len(base.args)}",
                        key=f"{key}.args", fix="give one entry per main input, {} to keep one")
    args = [_override(a, o, file, f"{key}.args[{i}]") for i, (a, o) in
            enumerate(zip(base.args, over.args or [TensorOverride()] * len(base.args), strict=False))]
    kwargs = dict(base.kwargs)
    for k, o in over.kwargs.items():
        if k not in kwargs:
            raise CaseError(file, f"no such keyword input {k!r}", key=f"{key}.kwargs",
                            fix=f"expected one of {sorted(kwargs)}")
        kwargs[k] = _override(kwargs[k], o, file, f"{key}.kwargs.{k}")
    init_kwargs = {**base.init_kwargs, **(over.init_kwargs or {})}
    return ResolvedInputSet(name, args, kwargs, init_kwargs, base.init_args)


def _override(spec: ArgSpec, over: TensorOverride, file: Path, key: str) -> ArgSpec:
    changes = over.model_dump(exclude_none=True)
    if isinstance(spec, ScalarSpec):
        extra = set(changes) - {"value"}
        if extra:
            raise CaseError(file, f"sets {sorted(extra)} on a scalar input", key=key,
                            fix="a scalar input takes only `value`")
        return ScalarSpec(value=changes.get("value", spec.value))
    if "value" in changes:
        raise CaseError(file, "sets `value` on a tensor input", key=key,
                        fix="a tensor input takes shape, dtype, init, ...")
    return spec.model_copy(update=changes)


def _format_validation(file: Path, err: ValidationError) -> CaseError:
    first = err.errors()[0]
    loc = ".".join(str(p) for p in first["loc"] if not str(p).startswith(("TensorSpec",
                                                                          "ScalarSpec")))
    msg = first["msg"].removeprefix("Value error, ")
    if first["type"] == "extra_forbidden":
        msg = "unknown key"
    elif first["type"] == "missing":
        msg = "required key is missing"
    found = first.get("input")
    text = msg if first["type"] == "missing" else f"{msg} (found {found!r})"
    more = len(err.errors()) - 1
    return CaseError(file, text + (f"; and {more} more problem(s)" if more else ""),
                     key=loc or "(top level)")


def parse_manifest(data: object, file: Path) -> CaseManifest:
    """Validate already-parsed YAML `data` as a case manifest."""
    if not isinstance(data, dict):
        raise CaseError(file, f"expected a mapping at the top level (found {type(data).__name__})",
                        fix="see docs/CASES.md's case example")
    try:
        return CaseManifest.model_validate(data)
    except ValidationError as err:
        raise _format_validation(file, err) from None


def load_case_dir(directory: Path) -> Case:
    """Load and validate the case in `directory`."""
    directory = directory.resolve()
    file = directory / MANIFEST_NAME
    if not file.is_file():
        raise CaseError(file, "missing", fix="a case directory holds manifest.yaml and model.py")
    try:
        data = yaml.safe_load(file.read_text())
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark else "?"
        raise CaseError(file, f"is not valid YAML ({where}: {getattr(err, 'problem', err)})",
                        fix="fix the YAML syntax") from None
    manifest = parse_manifest(data, file)
    case = Case(directory, manifest)
    if not case.model_file.is_file():
        raise CaseError(file, f"names {manifest.model.module!r}, which does not exist",
                        key="model.module", fix=f"create {case.model_file}")
    return case


def case_directories() -> list[Path]:
    """Case directories of the workspace and bundled with kopt (workspace first)."""
    seen: dict[str, Path] = {}
    for root in (user_cases_dir(), bundled_cases_dir()):
        if root.is_dir():
            for d in sorted(root.iterdir()):
                if (d / MANIFEST_NAME).is_file() and d.name not in seen:
                    seen[d.name] = d
    return list(seen.values())


def load_case(ref: str | Path) -> Case:
    """A case by bundled/workspace name or by path to its directory."""
    path = Path(ref).expanduser()
    if path.is_dir():
        return load_case_dir(path)
    if path.is_file() and path.name == MANIFEST_NAME:
        return load_case_dir(path.parent)
    for root in (user_cases_dir(), bundled_cases_dir()):
        candidate = root / str(ref)
        if (candidate / MANIFEST_NAME).is_file():
            return load_case_dir(candidate)
    names = [d.name for d in case_directories()]
    raise UnknownCaseError(
        f"unknown case {str(ref)!r}",
        fix=f"expected a case directory or one of: {', '.join(names) or '(none found)'}",
    )


def list_cases() -> list[Case | CaseError]:
    """Every case found, or the error that stops it loading (so a table can show both)."""
    out: list[Case | CaseError] = []
    for d in case_directories():
        try:
            out.append(load_case_dir(d))
        except CaseError as err:
            out.append(err)
    return out
