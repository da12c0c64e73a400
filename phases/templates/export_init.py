"""Approved kopt kernels for a PyTorch model: `apply(model)` patches an existing instance.

This file is the `__init__.py` of a package written by `kopt export` (it is kopt's
`phases/templates/export_init.py`, copied as is); it needs torch and triton, never kopt. Beside it:
`kernels.py` (the approved candidate: Triton kernels and `ModelNew`), `case.json` (the
structure the kernels were generated and verified for) and `README.md`.

`apply(model)` checks that `model` has the case's structure (state_dict keys, shapes and
dtypes, and the modules' scalar settings such as head counts and eps), then replaces the
instance's `forward` with the candidate's forward run on the instance's own parameters and
buffers: `model.state_dict()`, `model.parameters()` (the same Parameter objects), `.to()`,
`load_state_dict()` and optimizers keep working, and nothing is copied. `unapply(model)`
restores the original forward.
"""

from __future__ import annotations

import json
import types
from pathlib import Path
from typing import Any

import torch

from . import kernels

ModelNew = kernels.ModelNew
CASE: dict[str, Any] = json.loads((Path(__file__).with_name("case.json")).read_text())
"""What the kernels were verified for: `case`, `class`, `init_args`, `init_kwargs`, `state`
([key, shape, dtype] in state_dict order), `settings` ({module path: {attribute: value}})."""

_SETTING_TYPES = (bool, int, float, str)


def module_settings(model: torch.nn.Module) -> dict[str, dict[str, Any]]:
    """Each module's public scalar attributes (head counts, eps, strides...): structure that a
    state_dict does not show."""
    out: dict[str, dict[str, Any]] = {}
    for path, mod in model.named_modules():
        values = {}
        for k, v in vars(mod).items():
            if k.startswith("_") or k == "training":
                continue
            if isinstance(v, tuple) and all(isinstance(x, _SETTING_TYPES) for x in v):
                v = list(v)
            if isinstance(v, _SETTING_TYPES) or (isinstance(v, list) and
                                                 all(isinstance(x, _SETTING_TYPES) for x in v)):
                values[k] = v
        if values:
            out[path or "(model)"] = values
    return out


def _shape(s: Any) -> str:
    s = tuple(s)
    return f"({s[0]},)" if len(s) == 1 else str(s)


def structure_difference(model: torch.nn.Module) -> str | None:
    """The first way `model` differs from the case's structure, or None."""
    if not isinstance(model, torch.nn.Module):
        return f"expected an nn.Module, got {type(model).__name__}"
    state = model.state_dict()
    expected = {k: (shape, dtype) for k, shape, dtype in CASE["state"]}
    for key, (shape, dtype) in expected.items():
        if key not in state:
            return f"the model has no state_dict key {key!r} (the case's has shape {_shape(shape)})"
        t = state[key]
        if list(t.shape) != list(shape):
            return (f"state_dict key {key!r} has shape {_shape(t.shape)}, the case's has "
                    f"{_shape(shape)}")
        if str(t.dtype) != dtype:
            return f"state_dict key {key!r} is {t.dtype}, the case's is {dtype}"
    extra = [k for k in state if k not in expected]
    if extra:
        return f"the model has state_dict key {extra[0]!r}, which the case's model does not have"
    have = module_settings(model)
    for path, values in CASE.get("settings", {}).items():
        for k, v in values.items():
            got = have.get(path, {}).get(k, "(missing)")
            if got != v:
                where = "the model" if path == "(model)" else f"module {path!r}"
                return f"attribute {k!r} of {where} is {got!r}, the case's is {v!r}"
    return None


def _outside_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The model's non-persistent buffers and plain tensor attributes (a rotary embedding's
    tables, a recurrent cell's hidden state), by dotted path: ModelNew reads them from the
    instance at every call, as the model does (kopt's `harness.model_state`, restated here
    because this package never imports kopt)."""
    found: dict[str, torch.Tensor] = {}
    for path, module in model.named_modules():
        tensors = [(k, v) for k, v in vars(module).items() if isinstance(v, torch.Tensor)
                   and not isinstance(v, torch.nn.Parameter)]
        tensors += [(k, module._buffers[k]) for k in sorted(module._non_persistent_buffers_set)
                    if isinstance(module._buffers.get(k), torch.Tensor)]
        for name, value in tensors:
            found[f"{path}.{name}" if path else name] = value
    return found


class _Patch:
    """The candidate bound to one model instance: shares its tensors at every call."""

    def __init__(self, model: torch.nn.Module, original: Any) -> None:
        self.original = original
        device = next(iter(model.state_dict().values())).device if model.state_dict() else None
        self.new = ModelNew(*CASE["init_args"], **CASE["init_kwargs"])
        self.slots = []
        for key in model.state_dict():
            *path, leaf = key.split(".")
            mine, theirs = self.new, model
            for part in path:
                mine, theirs = getattr(mine, part), getattr(theirs, part)
            store = "_parameters" if leaf in theirs._parameters else "_buffers"
            self.slots.append((getattr(mine, store), getattr(theirs, store), leaf))
        self._share(model)  # the zeros ModelNew allocated are freed here
        if device is not None:
            self.new.to(device)  # its own constants (non-state buffers), if any
        self.new.train(model.training)

    def _share(self, model: torch.nn.Module) -> None:
        for mine, theirs, leaf in self.slots:
            mine[leaf] = theirs[leaf]
        for path, value in _outside_state_dict(model).items():
            owner, _, leaf = path.rpartition(".")
            setattr(self.new.get_submodule(owner) if owner else self.new, leaf, value)

    def __call__(self, model: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
        self._share(model)  # .to(), .half() or a re-assignment may have replaced a tensor
        first = next((a for a in args if isinstance(a, torch.Tensor)), None)
        if first is not None and any(t.device != first.device for t in self.new.buffers()
                                     if t.device.type != "meta"):
            self.new.to(first.device)
            self._share(model)
        return self.new(*args, **kwargs)


def apply(model: torch.nn.Module) -> torch.nn.Module:
    """Swap the approved kernels into `model` in place (its weights are kept); returns it.

    Raises ValueError naming the first difference when `model` does not have the structure
    the kernels were verified for.
    """
    why = structure_difference(model)
    if why is not None:
        raise ValueError(f"kopt kernels for {CASE['case']!r} do not fit this model: {why}")
    if "_kopt_patch" in model.__dict__:
        return model  # already patched
    patch = _Patch(model, model.__dict__.get("forward"))
    model.__dict__["_kopt_patch"] = patch  # not a submodule: state_dict stays the model's
    model.forward = types.MethodType(patch.__call__, model)
    return model


def unapply(model: torch.nn.Module) -> torch.nn.Module:
    """Restore the model's own forward."""
    patch = model.__dict__.pop("_kopt_patch", None)
    if patch is not None:
        model.__dict__.pop("forward", None)
        if patch.original is not None:
            model.forward = patch.original
    return model


__all__ = ["CASE", "ModelNew", "apply", "unapply", "structure_difference"]
