"""Outputs checked during timing: every timed call's output fingerprinted, a sample compared.

Worker side (`TimedOutputs`): wraps the forward the timer calls. It keeps a reference to the
latest call's outputs and fingerprints them when the timer next swaps input buffers
(`rotate`, which runs before the next call's start event) or when timing ends: never inside
the timed region. A fingerprint per output tensor: the float64 sum, the float64 L1 norm (one
reduction each, no full-size temporary) and `SAMPLE` elements at evenly spaced positions.
On a GPU the fingerprints stay on the device until timing ends (no synchronisation between
timed calls); they leave the worker in the job's response.

Parent side (`compare`): the fingerprints of every timed call are compared with the
reference's outputs on the same buffer set, computed where candidate code never ran. For
tolerances `atol`, `rtol` the element-wise bound implies
`|sum(out) - sum(ref)| <= atol * n + rtol * sum(|ref|)` (and the same for the L1 norm), so a
correct output never fails it, while a stale, lazy or made-up output fails it unless it
matches the reference's sums; the sampled elements are compared element-wise.

The verifier's own forwards go through the same wrapper and the same timer call path
(`verification.conditions.call_model`), so the frames under the model's forward do not tell
checking from timing.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch.utils._pytree import tree_leaves

SAMPLE = 32
"""Elements sampled per output tensor per timed call."""
MAX_CALLS = 4096
"""Timed calls fingerprinted at most (the rest are counted, not fingerprinted)."""


def _outputs(result: Any) -> list[torch.Tensor]:
    return [t for t in tree_leaves(result) if isinstance(t, torch.Tensor)]


class TimedOutputs:
    """The forward the timer calls; remembers what each call returned (see the module doc)."""

    def __init__(self, forward: Callable[[], Any], *, rotate: Callable[[int], None] | None = None,
                 record: bool = False) -> None:
        self.forward = forward
        self._rotate = rotate
        self.record = record
        self.result: Any = None
        self.buffer = 0
        self.calls = 0
        self._pending: tuple[int, Any] | None = None
        self._prints: list[tuple[int, list[tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]]]] = []

    def __call__(self) -> Any:
        self.result = self.forward()
        self.calls += 1
        if self.record:
            self._pending = (self.buffer, self.result)
        return self.result

    def rotate(self, i: int) -> None:
        """Fingerprint the last call (outside the timed region), then swap in buffer set i."""
        self.take()
        self.buffer = i
        if self._rotate is not None:
            self._rotate(i)

    def take(self) -> None:
        if self._pending is None:
            return
        buffer, result = self._pending
        self._pending = None
        if len(self._prints) >= MAX_CALLS:
            return
        prints = []
        with torch.no_grad():
            for t in _outputs(result):
                t = t.detach()
                if t.is_complex() or t.numel() == 0:
                    continue
                flat = t.reshape(-1)
                idx = torch.linspace(0, flat.numel() - 1, min(SAMPLE, flat.numel()),
                                     device=t.device).long()
                x = flat if t.dtype != torch.bool else flat.to(torch.uint8)
                prints.append((torch.sum(x, dtype=torch.float64),
                               torch.linalg.vector_norm(x.to(torch.float64) if not x.is_floating_point() else x,
                                                        ord=1, dtype=torch.float64),
                               flat[idx].clone(), flat.numel()))
        self._prints.append((buffer, prints))

    def fingerprints(self) -> list[dict[str, Any]]:
        """Every recorded call: `{"buffer", "outputs": [{"sum", "l1", "sample", "numel"}]}`."""
        self.take()
        out = []
        for buffer, prints in self._prints:
            out.append({"buffer": buffer, "outputs": [
                {"sum": float(s), "l1": float(l1), "sample": s_.double().cpu().tolist(), "numel": n}
                for s, l1, s_, n in prints]})
        return out


def expected(reference: list[torch.Tensor]) -> list[dict[str, Any]]:
    """The fingerprint of the reference's outputs (same positions as `TimedOutputs`)."""
    rec = TimedOutputs(lambda: reference, record=True)
    rec()
    return rec.fingerprints()[0]["outputs"]


def compare(prints: list[dict[str, Any]], references: dict[int, list[torch.Tensor]],
            tol: Callable[[torch.dtype], Any], buffers: int) -> tuple[bool, str]:
    """Do the timed calls' fingerprints match the reference on their buffer sets?

    `references`: buffer set index (modulo `buffers`) -> the baseline's outputs on it.
    """
    if not prints:
        return False, "no timed call was fingerprinted"
    refs = {b: (expected(r), r) for b, r in references.items()}
    for n, call in enumerate(prints):
        b = call["buffer"] % max(buffers, 1)
        if b not in refs:
            continue
        want, ref = refs[b]
        if len(call["outputs"]) != len(want):
            return False, f"timed call {n}: {len(call['outputs'])} outputs, the baseline returns {len(want)}"
        for j, (got, exp, r) in enumerate(zip(call["outputs"], want, ref, strict=True)):
            t = tol(r.dtype)
            atol, rtol = float(getattr(t, "atol", 0.0)), float(getattr(t, "rtol", 0.0))
            if got["numel"] != exp["numel"]:
                return False, f"timed call {n}: output[{j}] has {got['numel']} elements, expected {exp['numel']}"
            slack = atol * exp["numel"] + rtol * exp["l1"] + 1e-9 * max(exp["l1"], 1.0)
            for key in ("sum", "l1"):
                if not math.isfinite(exp[key]):  # NaN/Inf in the baseline: the sample decides
                    continue
                if not abs(got[key] - exp[key]) <= slack:
                    return False, (f"timed call {n} (buffer set {b}): output[{j}] {key} {got[key]:.6g}, "
                                   f"the baseline's {exp[key]:.6g} (bound {slack:.3g})")
            for i, (g, e) in enumerate(zip(got["sample"], exp["sample"], strict=False)):
                if math.isnan(e) and math.isnan(g) or (math.isinf(e) and g == e):
                    continue
                if not abs(g - e) <= atol + rtol * abs(e):
                    return False, (f"timed call {n} (buffer set {b}): output[{j}] sampled element "
                                   f"{i} is {g:.6g}, the baseline's {e:.6g}")
    return True, f"{len(prints)} timed calls fingerprinted; sums, L1 norms and samples match the baseline"
