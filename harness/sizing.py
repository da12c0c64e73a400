"""Fit a case's main input set into a size budget by its leading (batch) size.

KernelBench's level-1 files ask for tensors of 1.6-4.3 billion elements (6-17 GB in float32).
A verification draws such an input set five or more times and moves every output out of the
candidate's process, so at these sizes one problem outlasts a 10-minute GPU call and its
staged tensors outgrow the disk. `fit_leading` halves the leading size of every input that
shares the first input's leading size (as `verification.draws.with_leading` does) until the
largest input or output tensor holds at most `max_elements`, and checks on the `meta` device
that the baseline still runs. Nothing else changes: row widths, channels, constructor
arguments and dtypes stay as the file wrote them, so the kernels generated and timed are those
of the original problem on fewer rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

DEFAULT_MAX_ELEMENTS = 1 << 27
"""134M elements (512 MiB in float32) for the largest tensor: a level-2 KernelBench problem's
largest (a 3-D convolution's output) fits unchanged."""


@dataclass(frozen=True)
class Fit:
    """What `fit_leading` changed."""

    lead: int
    rows: int
    largest_before: int
    largest_after: int

    @property
    def note(self) -> str:
        over = " (still over the budget at its smallest)" if self.rows == 1 else ""
        return (f"leading size {self.lead} -> {self.rows} for the GPU size budget: largest tensor "
                f"{self.largest_before:,} -> {self.largest_after:,} elements{over}")


def largest_tensor(case: Any, resolved: Any) -> int | None:
    """Elements of the largest input or output tensor of one forward, run on the `meta`
    device; None when the baseline does not run there."""
    import torch

    from kopt.harness.case import TensorSpec
    from kopt.harness.data import TORCH_DTYPES, instantiate, model_class
    from kopt.harness.verification.draws import base_shape, materialize
    from kopt.harness.verification.tensors import input_keys

    specs = {k: s for k, s in input_keys(resolved).items() if isinstance(s, TensorSpec)}
    try:
        with torch.device("meta"):
            model = instantiate(model_class(case), resolved, case.model_file)
        bases = {k: torch.zeros(base_shape(s, None), dtype=TORCH_DTYPES[s.dtype], device="meta")
                 for k, s in specs.items()}
        inputs = materialize(resolved, bases, "meta")
        with torch.no_grad():
            out = model.eval()(*inputs.args, **inputs.kwargs)
    except Exception:  # the user's model: it may not run on meta at all
        return None
    sizes = [t.numel() for t in bases.values()]
    sizes += [t.numel() for t in _tensors(out)]
    return max(sizes, default=0)


def fit_leading(case: Any, max_elements: int) -> tuple[Any, Fit] | None:
    """The main input set with its leading size halved until its largest tensor holds at most
    `max_elements` (or the leading size reaches 1), when it is over that budget and the
    baseline accepts the smaller set; else None."""
    from kopt.harness.verification.draws import leading_size, with_leading

    main = case.input_set("main")
    lead = leading_size(main)
    before = largest_tensor(case, main)
    if lead is None or before is None or before <= max_elements or lead <= 1:
        return None
    rows, after, fitted = lead, before, None
    while rows > 1 and after > max_elements:
        smaller = with_leading(main, max(1, rows // 2), "main")
        size = largest_tensor(case, smaller)
        if size is None:
            break
        rows, after, fitted = max(1, rows // 2), size, smaller
    if fitted is None:
        return None
    return fitted, Fit(lead, rows, before, after)


def fit_case_dir(case: Any, max_elements: int) -> Fit | None:
    """`fit_leading` written into the case's `manifest.yaml` (its main `inputs`, and a line
    in its description); the case must be reloaded afterwards."""
    from kopt.harness.kernelbench import dump_manifest

    result = fit_leading(case, max_elements)
    if result is None:
        return None
    fitted, fit = result
    path: Path = case.manifest_file
    data = yaml.safe_load(path.read_text())
    for i, spec in enumerate(fitted.args):
        if hasattr(spec, "shape"):
            data["inputs"]["args"][i]["shape"] = list(spec.shape)
    for key, spec in fitted.kwargs.items():
        if hasattr(spec, "shape"):
            data["inputs"]["kwargs"][key]["shape"] = list(spec.shape)
    data["description"] = f"{data.get('description', '')} GPU inputs: {fit.note}.".strip()
    path.write_text(dump_manifest(data))
    return fit


def _tensors(value: Any) -> list[Any]:
    import torch

    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _tensors(v)]
    return []
