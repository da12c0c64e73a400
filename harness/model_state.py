"""The state a model keeps outside its state_dict: plain tensor attributes and non-persistent
buffers.

A model may hold a tensor as a plain attribute, neither parameter nor buffer, and replace it
in forward: a recurrent cell that carries its hidden state from one call to the next
(`self.hidden = torch.randn(batch, hidden)` in the constructor, `self.hidden =
tanh(self.i2h(cat(x, self.hidden)))` in forward, as KernelBench's level-3 VanillaRNN does).
`load_state_dict` neither reads nor writes such a tensor, so two instances built alike hold
whatever their generators drew, and the output of a call depends on the calls before it.

A non-persistent buffer (`register_buffer("cos", table, persistent=False)`: a rotary
embedding's tables, built in the constructor from its arguments) is outside the state_dict
too: a candidate that embedded its values as literals was right only for the constructor
arguments it was generated for (a 512-row table for a smoke set built with 128) and carried
1.4 MB of source for a 512x64 pair of tables. It is handled like a plain attribute, so a
candidate reads it from the instance as the model does.

The harness treats these tensors as part of the weights:

- a weights dict carries each of them under `ATTRIBUTE_PREFIX + dotted path` beside the
  state_dict's keys (`weights_of`), drawn fresh by the verifier like every weight;
- `load` puts the state_dict (strict) and the attributes into an instance;
- every compared call starts from the loaded values (`restart`): reference and candidate see
  the same state however many calls each made before, and
- the values the call leaves behind are compared like outputs (`after_call`), so a candidate
  that forgets to carry the state forward is wrong.
"""

from __future__ import annotations

from typing import Any

import torch

ATTRIBUTE_PREFIX = "attribute:"
"""Weights-dict key prefix of a plain tensor attribute (a state_dict key never has a colon)."""


def tensor_attributes(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Plain tensor attributes and non-persistent buffers of `model` and its submodules, by
    dotted path (parameters and buffers live in the modules' own dicts, not in `vars`)."""
    found: dict[str, torch.Tensor] = {}
    for path, module in model.named_modules():
        for name, value in vars(module).items():
            if isinstance(value, torch.Tensor) and not isinstance(value, torch.nn.Parameter):
                found[f"{path}.{name}" if path else name] = value
        for name in sorted(module._non_persistent_buffers_set):
            value = module._buffers.get(name)
            if isinstance(value, torch.Tensor):
                found[f"{path}.{name}" if path else name] = value
    return found


def weights_of(model: torch.nn.Module, *, take: bool = False) -> dict[str, torch.Tensor]:
    """The state_dict and the plain tensor attributes, detached, contiguous copies on the CPU.
    `take`: the caller throws the model away after, so a state_dict tensor that alone covers
    its whole storage is taken as it is, not copied (a verification draws two state_dicts from
    two fresh models: for an 8.6 GB model each copy is 8.6 GB more written through memory);
    one that shares its storage (tied weights) or views part of one is still copied."""
    state: dict[str, torch.Tensor] = {}
    storages: set[int] = set()
    for k, v in model.state_dict().items():
        t = v.detach()
        whole = (take and t.device.type == "cpu" and t.is_contiguous() and t.storage_offset() == 0
                 and t.untyped_storage().nbytes() == t.numel() * t.element_size()
                 and t.untyped_storage().data_ptr() not in storages)
        if whole:
            storages.add(t.untyped_storage().data_ptr())
        state[k] = t if whole else t.clone().contiguous()
    for path, value in tensor_attributes(model).items():
        state[ATTRIBUTE_PREFIX + path] = value.detach().cpu().clone().contiguous()
    return state


def split(weights: dict[str, Any]) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """(state_dict entries, attributes by dotted path)."""
    state = {k: v for k, v in weights.items() if not k.startswith(ATTRIBUTE_PREFIX)}
    attributes = {k[len(ATTRIBUTE_PREFIX):]: v for k, v in weights.items()
                  if k.startswith(ATTRIBUTE_PREFIX)}
    return state, attributes


def load(model: torch.nn.Module, weights: dict[str, Any], *, strict: bool = True
         ) -> dict[str, torch.Tensor]:
    """`weights` into `model`: the state_dict part by `load_state_dict`, each attribute set
    (a copy). Returns the attributes, for `restart`."""
    state, attributes = split(weights)
    model.load_state_dict(state, strict=strict)
    restart(model, attributes)
    return attributes


def restart(model: torch.nn.Module, attributes: dict[str, torch.Tensor]) -> None:
    """Each attribute set to a fresh copy of its loaded value, as the constructor left it
    (on the CPU: `.to(device)` moves parameters and buffers, not plain attributes). A fresh
    copy: the value a call returns or keeps is never the one the next call starts from.
    A registered buffer keeps the device `.to()` moved it to (the model's own forward reads
    it there)."""
    for path, value in attributes.items():
        owner_path, _, leaf = path.rpartition(".")
        owner = model.get_submodule(owner_path) if owner_path else model
        current = owner._buffers.get(leaf)
        if isinstance(current, torch.Tensor) and current.device != value.device:
            setattr(owner, leaf, value.to(current.device, copy=True))
        else:
            setattr(owner, leaf, value.clone())


def after_call(model: torch.nn.Module, names: list[str]) -> list[torch.Tensor]:
    """The attributes' values after a call, in `names`' order (an attribute the call deleted
    or made a non-tensor is an empty tensor, which compares unequal to any state)."""
    found = tensor_attributes(model)
    return [found.get(name, torch.empty(0)) for name in names]
