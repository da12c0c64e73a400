"""The candidate's constructor: the same signature and state_dict layout as the case's Model.

ModelNew must accept the baseline's constructor arguments and hold parameters with the same
keys and shapes, so the harness can load the baseline's weights into it strictly. Each
parameter dim is written as an expression of the constructor's integer arguments, found by
instantiating the model on the meta device with each argument doubled (a dim that doubles
with `hidden` is `hidden`, one that halves when `heads` doubles is `... // heads`), and
checked against every input set of the case. Sums are fitted too (a dense block's
`in_features + 2 * growth`, a recurrent cell's `input_size + hidden_size`), and a monomial plus
a constant (a class token's `(image // patch) ** 2 + 1`), from each argument also quadrupled.
"""

from __future__ import annotations

import ast
import inspect
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import torch

from kopt.harness.case import Case
from kopt.harness.data import model_class


@dataclass
class ParamSpec:
    """One state_dict entry of ModelNew."""

    key: str
    shape: list[str]
    """Each dim as Python source over the constructor's arguments."""
    dtype: torch.dtype
    persistent_param: bool
    """True: an nn.Parameter; False: a buffer."""


@dataclass
class Constructor:
    """ModelNew.__init__'s signature and the state it builds."""

    signature: str
    """Parameter list source, e.g. `hidden: int = 4096`."""
    params: list[ParamSpec]
    notes: list[str]


def _literal_default(v: Any) -> str | None:
    text = repr(v)
    try:
        ast.literal_eval(text)
        return text
    except (ValueError, SyntaxError):
        return None


_STATES: dict[tuple[Any, str, str], dict[str, torch.Tensor] | None] = {}
"""Meta state dicts by (model class, constructor arguments), kept for the process: the fit
below builds the model at a dozen argument sets, and an optimizer's rounds, a suite's two
input sets and a run's phases generate the same case again (ResNet101's 15 constructions took
2.7 of a 9.1 s codegen on a 2-core CPU, 2026-11-29). A model file that changes is another
module, so another class (`harness.data.load_model_module`)."""


def _state(cls: type[torch.nn.Module], args: list[Any], kwargs: dict[str, Any]) -> dict[str, torch.Tensor] | None:
    """The state dict (meta tensors) of `cls(*args, **kwargs)`, or None when the constructor
    rejects those arguments or needs real tensors."""
    key = (cls, repr(list(args)), repr(sorted(kwargs.items())))
    if key not in _STATES:
        try:
            with torch.device("meta"):
                m = cls(*args, **kwargs)
            _STATES[key] = dict(m.state_dict())
        except Exception:  # noqa: BLE001 - a constructor that rejects the perturbed value
            _STATES[key] = None
        if len(_STATES) > 1024:  # a long-lived process (the TUI, a suite) over many cases
            _STATES.pop(next(iter(_STATES)))
    got = _STATES[key]
    return None if got is None else dict(got)


def build_constructor(case: Case, model: torch.nn.Module, input_set: str = "main") -> Constructor:
    """Signature and parameter layout of ModelNew for `case`; a dim no expression explains is
    fixed at its value for `input_set` (the set the candidate was captured on)."""
    cls = model_class(case)
    sig = inspect.signature(cls.__init__)
    resolved = case.input_set("main")
    notes: list[str] = []
    bound = sig.bind_partial(None, *resolved.init_args, **resolved.init_kwargs)
    bound.apply_defaults()
    values = {k: v for k, v in bound.arguments.items() if k != "self"}
    parts = []
    for p in list(sig.parameters.values())[1:]:
        if p.kind == p.VAR_POSITIONAL:
            parts.append(f"*{p.name}")
        elif p.kind == p.VAR_KEYWORD:
            parts.append(f"**{p.name}")
        elif p.default is inspect.Parameter.empty:
            parts.append(p.name)
        else:
            d = _literal_default(p.default)
            parts.append(f"{p.name}={d if d is not None else 'None'}")
    signature = ", ".join(parts)

    # the layout at the main set's arguments (the model given may be built for another set),
    # then at each integer argument doubled and quadrupled: the samples each dim is fitted to
    base_state = _state(cls, [], dict(values)) or dict(model.state_dict())
    ints = _int_arguments(values)
    samples: list[tuple[Sample, dict[str, torch.Size]]] = [
        (Sample.of(dict(values)), {k: t.shape for k, t in base_state.items()})]
    joint = [[(arg, 2) for arg in ints], [(arg, 2 + 2 * (i % 2)) for i, arg in enumerate(ints)]]
    for moves in [[(arg, factor)] for arg in ints for factor in (2, 4)] + joint:
        kw = dict(values)
        for arg, factor in moves:  # one argument alone (the fit), or all at once (the check:
            kw = _scaled(kw, arg, factor)  # `a + b` and `a * b // 32 + 32` agree on single moves)
        st = _state(cls, [], kw)
        if st is not None:
            samples.append((Sample.of(kw), {k: t.shape for k, t in st.items()}))
    # ... and every input set's own arguments, the ones the candidate must build at
    checks: list[tuple[str, dict[str, Any], dict[str, torch.Size]]] = []
    for name in case.input_set_names():
        rs = case.input_set(name)
        st = _state(cls, list(rs.init_args), dict(rs.init_kwargs))
        if st is None:
            continue
        b2 = sig.bind_partial(None, *rs.init_args, **rs.init_kwargs)
        b2.apply_defaults()
        env = {k: v for k, v in b2.arguments.items() if k != "self"}
        checks.append((name, env, {k: t.shape for k, t in st.items()}))
    traced = next((st for name, _env, st in checks if name == input_set), None)

    params = []
    named = dict(model.named_parameters())
    for key, t in base_state.items():
        dims = []
        for d, size in enumerate(t.shape):
            points = [(sample, int(st[key][d])) for sample, st in samples
                      if key in st and len(st[key]) == t.dim()]
            expr = fit_dim(int(size), points, ints)
            if expr is not None and not all(
                    _evaluates_to(expr, env, int(st[key][d])) for _name, env, st in checks
                    if key in st and len(st[key]) == t.dim()):
                expr = None
            if expr is None:
                fixed = int(traced[key][d]) if traced is not None and key in traced else int(size)
                expr = str(fixed)
                if any(key in st and len(st[key]) == t.dim() and int(st[key][d]) != fixed
                       for _n, _e, st in checks):
                    notes.append(f"{key}: dim {d} not derivable from the constructor arguments; "
                                 f"fixed at {fixed} (input set {input_set!r})")
            dims.append(expr)
        params.append(ParamSpec(key, dims, t.dtype, key in named))
    return Constructor(signature, params, notes)


def fit_dim(size: int, points: list[tuple[Sample, int]], ints: dict[str, int]) -> str | None:
    """Python source over the constructor's integer arguments that gives a dim's size at every
    sampled argument set (`points`: the bound constructor arguments, the size);
    `size` is its value at `ints`. Tried in order: a constant, a monomial (`hidden`,
    `4 * hidden`, `dim // heads`), an affine sum (`in_features + 2 * growth`), and a monomial
    plus a constant (`(image // patch) ** 2 + 1` as `image * image // (patch * patch) + 1`).
    None when none fits."""
    moved = {arg for sample, v in points for arg in ints
             if sample.ints.get(arg) != ints[arg] and v != size}
    if not moved:
        return str(size)
    for candidate in (_monomial(size, points, ints, Fraction(0)), _affine(size, points, ints),
                      _offset_monomial(size, points, ints)):
        if candidate is not None and all(_evaluates_to(candidate, sample.env, v)
                                         for sample, v in points):
            return candidate
    return None


@dataclass(frozen=True)
class Sample:
    """One sampled set of constructor arguments (`env`, bound by name) and its integer ones
    (`_int_arguments(env)`, computed once: ResNet101's fit asks each sample for them once per
    dim of every parameter, 54,000 times)."""

    env: dict[str, Any]
    ints: dict[str, int]

    @staticmethod
    def of(env: dict[str, Any]) -> Sample:
        return Sample(env, _int_arguments(env))


def _single_moves(points: list[tuple[Sample, int]], ints: dict[str, int]
                  ) -> dict[str, list[tuple[Fraction, int]]]:
    """Per argument: (scale factor, size) of the samples that changed that argument alone."""
    moves: dict[str, list[tuple[Fraction, int]]] = {}
    for sample, v in points:
        at = sample.ints
        changed = [a for a in ints if at.get(a) != ints[a]]
        if len(changed) == 1 and at.get(changed[0]):
            a = changed[0]
            moves.setdefault(a, []).append((Fraction(at[a], ints[a]), v))
    return moves


def _monomial(size: int, points: list[tuple[Sample, int]], ints: dict[str, int],
              offset: Fraction) -> str | None:
    """`c * prod(arg ** e) + offset`, each exponent read from a doubling of that argument."""
    base = Fraction(size) - offset
    if base <= 0:
        return None
    exps: dict[str, int] = {}
    for arg, moves in _single_moves(points, ints).items():
        for factor, v in moves:
            if factor != 2:
                continue
            ratio = (Fraction(v) - offset) / base
            e = {Fraction(1): 0, Fraction(2): 1, Fraction(1, 2): -1, Fraction(4): 2,
                 Fraction(1, 4): -2}.get(ratio)
            if e is None:
                return None
            if e:
                exps[arg] = e
    expr = _dim_expr(int(base), exps, ints) if base.denominator == 1 else None
    if expr is None or offset == 0:
        return expr
    return f"{expr} + {offset}" if offset > 0 else f"{expr} - {-offset}"


def _affine(size: int, points: list[tuple[Sample, int]], ints: dict[str, int]) -> str | None:
    """`c0 + sum(c_i * arg_i)` with integer coefficients, each read from a doubling."""
    coef: dict[str, int] = {}
    for arg, moves in _single_moves(points, ints).items():
        doubled = [v for factor, v in moves if factor == 2]
        if not doubled:
            continue
        c = Fraction(doubled[0] - size, ints[arg])
        if c.denominator != 1:
            return None
        if c:
            coef[arg] = int(c)
    c0 = size - sum(c * ints[a] for a, c in coef.items())
    terms = [(f"{c} * {a}" if c != 1 else a) for a, c in sorted(coef.items()) if c > 0]
    terms += [f"- {-c} * {a}" if c != -1 else f"- {a}" for a, c in sorted(coef.items()) if c < 0]
    if not terms:
        return None
    text = " + ".join(t for t in terms if not t.startswith("-"))
    for t in terms:
        if t.startswith("-"):
            text = f"{text} {t}" if text else f"0 {t}"
    if c0:
        text += f" + {c0}" if c0 > 0 else f" - {-c0}"
    return text


def _offset_monomial(size: int, points: list[tuple[Sample, int]],
                     ints: dict[str, int]) -> str | None:
    """A monomial plus a constant, the constant solved from an argument sampled at 1x, 2x and
    4x: (v2 - c)^2 = (v1 - c)(v4 - c)."""
    for _arg, moves in _single_moves(points, ints).items():
        by = {factor: v for factor, v in moves}
        if Fraction(2) in by and Fraction(4) in by:
            v1, v2, v4 = size, by[Fraction(2)], by[Fraction(4)]
            den = 2 * v2 - v1 - v4
            if den:
                offset = Fraction(v2 * v2 - v1 * v4, den)
                if offset and offset.denominator == 1:
                    return _monomial(size, points, ints, offset)
    return None


def _evaluates_to(expr: str, env: dict[str, Any], want: int) -> bool:
    try:
        return eval(expr, {}, dict(env)) == want  # noqa: S307 - our own arithmetic over ints
    except Exception:  # noqa: BLE001 - an argument missing at this set
        return False


def constructor_ints(case: Case, input_set: str = "main") -> dict[str, int]:
    """The model's integer constructor arguments at `input_set`, by source (`_int_arguments`);
    empty when the signature cannot be bound."""
    try:
        sig = inspect.signature(model_class(case).__init__)
        resolved = case.input_set(input_set)
        bound = sig.bind_partial(None, *resolved.init_args, **resolved.init_kwargs)
        bound.apply_defaults()
    except (TypeError, ValueError):
        return {}
    return _int_arguments({k: v for k, v in bound.arguments.items() if k != "self"})


def _is_size(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v > 0


def _int_arguments(values: dict[str, Any]) -> dict[str, int]:
    """The constructor's positive integer arguments, by the Python source that reads them:
    `hidden`, and `bias_shape[0]` for each element of a list or tuple of sizes (KernelBench's
    `bias_shape = (out_channels, 1, 1)`)."""
    found: dict[str, int] = {}
    for k, v in values.items():
        if _is_size(v):
            found[k] = v
        elif isinstance(v, (list, tuple)) and v and all(_is_size(x) for x in v):
            for i, x in enumerate(v):
                found[f"{k}[{i}]"] = x
    return found


def _scaled(values: dict[str, Any], path: str, factor: int) -> dict[str, Any]:
    """The constructor arguments with the size at `path` (`hidden`, `bias_shape[0]`) times
    `factor`."""
    kw = dict(values)
    name, _, index = path.partition("[")
    if not index:
        kw[name] = kw[name] * factor
        return kw
    i = int(index.rstrip("]"))
    seq = list(kw[name])
    seq[i] *= factor
    kw[name] = type(kw[name])(seq)
    return kw


def _dim_expr(size: int, exps: dict[str, int], ints: dict[str, int]) -> str:
    if not exps:
        return str(size)
    num, den = [], []
    c = Fraction(size)
    for arg, e in sorted(exps.items()):
        c /= Fraction(ints[arg]) ** e
        (num if e > 0 else den).extend([arg] * abs(e))
    if c.denominator != 1:
        den_c = c.denominator
        num_c = c.numerator
    else:
        den_c, num_c = 1, c.numerator
    top = " * ".join(([str(num_c)] if num_c != 1 else []) + num) or "1"
    bottom = " * ".join(([str(den_c)] if den_c != 1 else []) + den)
    expr = f"{top} // ({bottom})" if bottom else top
    return expr
