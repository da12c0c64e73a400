"""The model summary: parameters, FLOPs, bytes and every leaf module's output shape.

Computed with forward hooks and torch's FlopCounterMode on the `meta` device at the input
set's sizes (no data, no time); a model that cannot run on `meta` (data-dependent Python)
runs for real on the CPU at the smoke inputs instead, and the summary says which set it
describes. Bytes per layer are what the layer must move at least: its parameters read once
and its output written once (its input is the previous layer's output, counted there).
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._pytree import tree_leaves

from kopt.harness.case import Case


def _nbytes(tensors: list[torch.Tensor]) -> int:
    return int(sum(t.numel() * t.element_size() for t in tensors))


def _hooked_forward(model: torch.nn.Module, args: list[Any], kwargs: dict[str, Any]
                    ) -> tuple[list[dict[str, Any]], dict[str, float]]:
    from kopt.harness.roofline import flop_counter

    layers: list[dict[str, Any]] = []
    handles = []
    for name, mod in model.named_modules():
        if name and not list(mod.children()):
            def hook(m: torch.nn.Module, _i: Any, out: Any, name: str = name) -> None:
                outs = [t for t in tree_leaves(out) if isinstance(t, torch.Tensor)]
                shapes = [list(t.shape) for t in outs]
                own = list(m.parameters(recurse=False)) + list(m.buffers(recurse=False))
                layers.append({"name": name, "type": type(m).__name__,
                               "output_shape": shapes[0] if len(shapes) == 1 else shapes or None,
                               "params": int(sum(p.numel() for p in m.parameters(recurse=False))),
                               "bytes": _nbytes(own) + _nbytes(outs)})
            handles.append(mod.register_forward_hook(hook))
    try:
        with torch.no_grad(), flop_counter() as counter:
            out = model(*args, **kwargs)
    finally:
        for h in handles:
            h.remove()
    flops = {str(k): float(sum(v.values())) for k, v in counter.get_flop_counts().items()}
    flops["(total)"] = float(counter.get_total_flops())
    outs = [t for t in tree_leaves(out) if isinstance(t, torch.Tensor)]
    shapes = [list(t.shape) for t in outs]
    layers.append({"name": "(output)", "type": type(model).__name__,
                   "output_shape": shapes[0] if len(shapes) == 1 else shapes or None,
                   "params": int(sum(p.numel() for p in model.parameters())),
                   "bytes": _nbytes(outs)})
    return layers, flops


def model_summary(case: Case, input_set: str = "main") -> dict[str, Any]:
    """Parameters, FLOPs, bytes and per-layer output shapes of the case's model on `input_set`.

    Keys: `total_params`, `trainable_params`, `param_bytes`, `flops` (whole forward, None when
    not countable), `input_set` (the set described), `layers` (each leaf module in call order:
    `name`, `type`, `output_shape`, `params`, `bytes`, `flops`), ending with `(output)`.
    """
    from kopt.harness.data import agent_provide_inputs, build_model, instantiate, model_class
    from kopt.harness.roofline import _meta_inputs

    used = input_set
    try:
        with torch.device("meta"):
            model = instantiate(model_class(case), case.input_set(input_set), case.model_file)
        args, kwargs = _meta_inputs(case, input_set)
        layers, flops = _hooked_forward(model, args, kwargs)
    except Exception:  # noqa: BLE001 - data-dependent models cannot run on meta
        used = "smoke" if "smoke" in case.input_set_names() else input_set
        model = build_model(case, used)
        inputs = agent_provide_inputs(case, used)
        layers, flops = _hooked_forward(model, list(inputs.args), dict(inputs.kwargs))
    for layer in layers:
        # FlopCounterMode keys modules by their dotted path under the root's class name
        key = type(model).__name__ + ("" if layer["name"] == "(output)" else f".{layer['name']}")
        layer["flops"] = flops.get(key, 0.0)
    params = list(model.parameters())
    total = flops["(total)"]
    return {"total_params": int(sum(p.numel() for p in params)),
            "trainable_params": int(sum(p.numel() for p in params if p.requires_grad)),
            "param_bytes": _nbytes(params),
            "flops": total, "input_set": used, "layers": layers}


def summary_text(summary: dict[str, Any], *, limit: int = 40) -> str:
    """The summary as a plain table (what `kopt baseline --profile` prints)."""
    flops = summary.get("flops")
    lines = [f"{summary['total_params']:,} parameters ({summary.get('param_bytes', 0) / 1e6:.1f} MB), "
             f"{'-' if flops is None else f'{flops / 1e9:.3f}'} GFLOP per forward "
             f"({summary.get('input_set')} inputs)",
             f"{'layer':<28} {'type':<14} {'output shape':<22} {'params':>11} {'MB':>9} {'GFLOP':>9}"]
    rows = summary["layers"]
    for layer in rows[:limit]:
        shape = "x".join(map(str, layer["output_shape"])) if isinstance(layer["output_shape"], list) \
            and all(isinstance(d, int) for d in layer["output_shape"]) else str(layer["output_shape"])
        lines.append(f"{layer['name'][:28]:<28} {layer['type'][:14]:<14} {shape[:22]:<22} "
                     f"{layer.get('params', 0):>11,} {layer.get('bytes', 0) / 1e6:>9.3f} "
                     f"{layer.get('flops', 0.0) / 1e9:>9.3f}")
    if len(rows) > limit:
        lines.append(f"... and {len(rows) - limit} more layer(s)")
    return "\n".join(lines)
