"""The candidate's constructor: the same signature and state_dict layout as the case's Model.

ModelNew must accept the baseline's constructor arguments and hold parameters with the same
keys and shapes, so the harness can load the baseline's weights into it strictly. Each
parameter dim is written as an expression of the constructor's integer arguments, found by
instantiating the model on the meta device with each argument doubled (a dim that doubles
with `hidden` is `hidden`, one that halves when `heads` doubles is `... // heads`), and
checked against every input set of the case.
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


def _state(cls: type[torch.nn.Module], args: list[Any], kwargs: dict[str, Any]) -> dict[str, torch.Tensor] | None:
    try:
        with torch.device("meta"):
            m = cls(*args, **kwargs)
        return dict(m.state_dict())
    except Exception:  # noqa: BLE001 - a constructor that rejects the perturbed value
        return None


def build_constructor(case: Case, model: torch.nn.Module) -> Constructor:
    """Signature and parameter layout of ModelNew for `case`."""
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

    # positional names for init_args (KernelBench's get_init_inputs())
    # the layout at the main set's arguments (the model given may be built for another set)
    base_state = _state(cls, [], dict(values)) or dict(model.state_dict())
    ints = _int_arguments(values)
    exps: dict[str, dict[str, dict[int, int]]] = {k: {} for k in base_state}
    for arg in ints:
        st = _state(cls, [], _doubled(values, arg))
        if st is None:
            continue
        for key, t in base_state.items():
            if key not in st or st[key].dim() != t.dim():
                continue
            for d, (s0, s1) in enumerate(zip(t.shape, st[key].shape, strict=False)):
                if s0 != s1 and s0 > 0:
                    ratio = Fraction(s1, s0)
                    e = {Fraction(2): 1, Fraction(1, 2): -1, Fraction(4): 2}.get(ratio)
                    if e is not None:
                        exps[key].setdefault(d, {})[arg] = e
    params = []
    named = dict(model.named_parameters())
    for key, t in base_state.items():
        dims = []
        for d, s in enumerate(t.shape):
            dims.append(_dim_expr(int(s), exps[key].get(d, {}), ints))
        params.append(ParamSpec(key, dims, t.dtype, key in named))
    # check the expressions against every input set's constructor arguments
    for name in case.input_set_names():
        rs = case.input_set(name)
        m = _meta_model(cls, rs.init_args, rs.init_kwargs)
        if m is None:
            continue
        b2 = sig.bind_partial(None, *rs.init_args, **rs.init_kwargs)
        b2.apply_defaults()
        env = {k: v for k, v in b2.arguments.items() if k != "self"}
        st = m.state_dict()
        for p in params:
            want = list(st[p.key].shape)
            try:
                got = [eval(e, {}, dict(env)) for e in p.shape]  # noqa: S307 - our own arithmetic
            except Exception:  # noqa: BLE001
                got = None
            if got != want:
                notes.append(f"{p.key}: shape {want} for input set {name!r} not derivable from the "
                             f"constructor arguments; baked")
                p.shape = [str(s) for s in st[p.key].shape] if name == "main" else p.shape
    return Constructor(signature, params, notes)


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


def _doubled(values: dict[str, Any], path: str) -> dict[str, Any]:
    """The constructor arguments with the size at `path` (`hidden`, `bias_shape[0]`) doubled."""
    kw = dict(values)
    name, _, index = path.partition("[")
    if not index:
        kw[name] = kw[name] * 2
        return kw
    i = int(index.rstrip("]"))
    seq = list(kw[name])
    seq[i] *= 2
    kw[name] = type(kw[name])(seq)
    return kw


def _meta_model(cls: type[torch.nn.Module], args: list[Any], kwargs: dict[str, Any]) -> torch.nn.Module | None:
    try:
        with torch.device("meta"):
            return cls(*args, **kwargs)
    except Exception:  # noqa: BLE001 - a constructor that needs real tensors: skip the check
        return None


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
