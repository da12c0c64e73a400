"""How close a candidate's outputs must be to the baseline's (docs/CASES.md, "Verification").

Two bounds, both required: element-wise `|out - ref| <= atol + rtol * |ref|`, and the relative
error `||out - ref|| / ||ref||` under `rel`. The second one is what stops an all-zeros output
from passing for a tensor whose values are all smaller than `atol`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kopt.harness.case import Case

# docs/CASES.md's defaults: (atol = rtol, rel) by dtype and precision.
_FLOAT32_STRICT = (1e-4, 1e-5)
_FLOAT32_TF32 = (5e-3, 2e-3)
_HALF = (1e-2, 2e-3)
_BFLOAT16 = (1e-2, 1e-2)
# float64 is not in docs/CASES.md; a float64 model is compared as tightly as float32 strict.
_DEFAULTS: dict[torch.dtype, tuple[float, float]] = {
    torch.float64: _FLOAT32_STRICT,
    torch.float32: _FLOAT32_STRICT,
    torch.float16: _HALF,
    torch.bfloat16: _BFLOAT16,
}


@dataclass(frozen=True)
class Tolerance:
    """The bounds one output tensor is held to."""

    atol: float
    """Absolute part of the element-wise bound."""
    rtol: float
    """Relative part of the element-wise bound (times |ref|)."""
    rel: float
    """Bound on ||out - ref|| / ||ref|| over the whole tensor."""
    exact: bool = False
    """Integer and bool outputs must match exactly."""

    def describe(self) -> str:
        if self.exact:
            return "exact"
        return f"atol={self.atol:g} rtol={self.rtol:g} rel<{self.rel:g}"


def default_tolerance(dtype: torch.dtype, precision: str = "strict") -> Tolerance:
    """docs/CASES.md's default for an output of `dtype` under the case's `precision`."""
    if not dtype.is_floating_point:
        return Tolerance(0.0, 0.0, 0.0, exact=True)
    if dtype == torch.float32 and precision == "tf32":
        atol, rel = _FLOAT32_TF32
    else:
        atol, rel = _DEFAULTS.get(dtype, _FLOAT32_STRICT)
    return Tolerance(atol, atol, rel)


def tolerance_for(case: Case, dtype: torch.dtype) -> Tolerance:
    """The case's own `tolerance:` where it sets one (its `rel` falls back to the default)."""
    base = default_tolerance(dtype, case.manifest.precision)
    over = case.manifest.tolerance
    if over is None or base.exact:
        return base
    return Tolerance(over.atol, over.rtol, over.rel if over.rel is not None else base.rel)
