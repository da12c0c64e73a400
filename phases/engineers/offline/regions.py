"""Regions of an offline candidate and the switch that picks Triton or PyTorch for each.

Each fusion group of a generated candidate is a *region*: one Triton kernel (`_gN_*_kernel`,
launched by `_launch_gN`) and, beside it in `ModelNew.forward`, the same ops written in
PyTorch. The module-level dict `KOPT_REGIONS` ({"gN": "triton" | "torch"}) is read at every
forward call, so a caller can time a region both ways in one process by assigning to it:

    module.KOPT_REGIONS["g1"] = "torch"     # or rewrite the file: with_choices(source, {...})

Regions whose ops have no PyTorch form here are not in the dict (they always run in Triton).

The verifier's `no_pytorch_fallback` check rejects a candidate whose forward runs every
baseline compute op in PyTorch: a region switched to torch is fine only while at least one
region still runs in Triton. When every region is faster in PyTorch, the right outcome is to
keep PyTorch (no candidate): `with_choices` refuses that choice.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

from kopt.harness.errors import EngineerError
from kopt.harness.verification.static import parse_source
from kopt.phases.engineers.offline.graph_replay import (
    HOST_US_PER_STEP,
    TRITON_LAUNCH_US,
    forward_host_us,
)
from kopt.phases.source_edit import literal, replace_value

SWITCH = "KOPT_REGIONS"
"""The candidate's module-level dict: region name -> "triton" | "torch"."""
CHOICES = ("triton", "torch")


@dataclass
class Region:
    """One generated region of a candidate."""

    name: str
    """`gN`: the key in KOPT_REGIONS."""
    choice: str
    """What the candidate runs now: "triton" or "torch"."""
    kernels: list[str] = field(default_factory=list)
    """Its Triton kernels (keys of KOPT_CONFIG / KOPT_TUNABLES)."""


def _dict_literal(tree: ast.Module, name: str) -> tuple[dict, ast.Assign | None]:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets):
            return ast.literal_eval(node.value), node
    return {}, None


def regions(source: str) -> list[Region]:
    """The switchable regions of a candidate's source (empty for a file without KOPT_REGIONS)."""
    tree = parse_source(source)
    switch, _ = _dict_literal(tree, SWITCH)
    config, _ = _dict_literal(tree, "KOPT_CONFIG")
    out = []
    for name, choice in switch.items():
        out.append(Region(name, choice, [k for k in config if re.match(rf"_{re.escape(name)}_", k)]))
    return out


def with_choices(source: str, choices: dict[str, str]) -> str:
    """`source` with KOPT_REGIONS updated by `choices` (the others keep theirs).

    Raises EngineerError for an unknown region or choice, and when every region would run in
    PyTorch (keep the baseline instead: no candidate)."""
    tree = parse_source(source)
    switch, node = _dict_literal(tree, SWITCH)
    if node is None:
        raise EngineerError(f"the candidate has no {SWITCH} dict", fix="regenerate it with the offline engineer")
    for name, choice in choices.items():
        if name not in switch:
            raise EngineerError(f"no region {name!r} in the candidate", fix=f"expected one of {sorted(switch)}")
        if choice not in CHOICES:
            raise EngineerError(f"region {name}: expected one of {CHOICES} (not {choice!r})")
    new = {**switch, **choices}
    if new and all(c == "torch" for c in new.values()):
        raise EngineerError("every region would run in PyTorch",
                            fix="keep the PyTorch baseline: this candidate is not faster anywhere")
    lines = source.splitlines(keepends=True)
    start, end = node.lineno - 1, node.end_lineno
    body = "".join(f'    "{k}": "{v}",\n' for k, v in new.items())
    lines[start:end] = [f"{SWITCH} = {{\n{body}}}\n"]
    return "".join(lines)


KEY = SWITCH + "/"
"""Prefix of a region's dimension in the accelerator's search space: `KOPT_REGIONS/g1`."""


def is_region_key(key: str) -> bool:
    return key.startswith(KEY)


def region_of(key: str) -> str:
    """`KOPT_REGIONS/g1` -> `g1`."""
    return key[len(KEY):]


def region_space(source: str) -> dict[str, list[str]]:
    """One search dimension per region, `{"KOPT_REGIONS/g1": ["triton", "torch"], ...}` (the
    current choice first), when the candidate has two regions or more: one region switched to
    PyTorch is the baseline itself, which the run's outcome already compares against."""
    found = regions(source)
    if len(found) < 2:
        return {}
    return {KEY + r.name: [r.choice] + [c for c in CHOICES if c != r.choice] for r in found}


def apply_region_choices(source: str, config: dict[str, object]) -> str:
    """`source` with the region keys of `config` applied (other keys are ignored); raises
    EngineerError when every region would run in PyTorch."""
    choices = {region_of(k): str(v) for k, v in config.items() if is_region_key(k)}
    return with_choices(source, choices) if choices else source


def _family(entry: dict[str, object]) -> str:
    """What a kernel is, from the launch parameters its KOPT_CONFIG entry has: a matmul has a
    K block; other kernels are told apart by their block names."""
    if "BLOCK_K" in entry:
        return "matmul"
    return "+".join(sorted(k for k in entry if k.isupper()))


def region_families(source: str) -> dict[str, list[str]]:
    """Region keys grouped by the kind of their first kernel (`{"matmul": ["KOPT_REGIONS/g1",
    ...], ...}`), for families of two regions or more that are not every region: one search
    dimension per family. A network's 25 small products, each a few percent of the forward,
    gain under the timer's noise one at a time and well over it together (ViT's fp32 linears
    on Triton's template: 0.42x of eager, H200 2026-11-27)."""
    tree = parse_source(source)
    config, _ = _dict_literal(tree, "KOPT_CONFIG")
    found = regions(source)
    families: dict[str, list[str]] = {}
    for r in found:
        entry = config.get(r.kernels[0]) if r.kernels else None
        if isinstance(entry, dict):
            families.setdefault(_family(entry), []).append(KEY + r.name)
    return {f: keys for f, keys in families.items() if 1 < len(keys) < len(found)}


BACKEND_KEY = "KOPT_CONFIG/BACKEND"
"""The search dimension that puts every matmul kernel that may on cuBLAS's product, with the
kernel keeping only its epilogue (`kernels.matmul`: BACKEND `cublas`)."""


def cublas_kernels(source: str) -> list[str]:
    """Matmul kernels that launch Triton's product now and may take cuBLAS's instead."""
    tree = parse_source(source)
    config, _ = _dict_literal(tree, "KOPT_CONFIG")
    tunables, _ = _dict_literal(tree, "KOPT_TUNABLES")
    return [k for k, entry in config.items()
            if isinstance(entry, dict) and entry.get("BACKEND", "cublas") != "cublas"
            and "cublas" in (tunables.get(k) or {}).get("BACKEND", [])]


GRAPH_KEY = "KOPT_GRAPH"
"""The search dimension that runs the forward op by op instead of replaying it as one CUDA
graph (`graph_replay`). A replay clones the outputs out (and copies the inputs in, unless they
come at the same addresses again); a forward whose kernels keep the GPU busier than Python
keeps the host gains nothing from the graph and still pays the copies (GPT-2's block: 0.013 ms
of copies in 0.296 ms on an H200). Which holds depends on the GPU and the sizes, so it is
timed."""


def replays_graph(source: str) -> bool:
    """Whether the candidate may replay its forward as a CUDA graph, so that timing it op by
    op can differ: `KOPT_GRAPH = True` and a forward whose host time (`graph_replay`'s
    estimate: FORWARD_STEPS steps, FORWARD_TRITON of them Triton launches) is more than a
    replay's own steps with one input copied in and one output out (three aten steps: the
    least a graph can cost; `_graph_pays` decides at run time with the real copies)."""
    steps = literal(source, "FORWARD_STEPS")
    if literal(source, GRAPH_KEY) is not True or not isinstance(steps, int):
        return False

    def number(name: str, default: float) -> float:  # the file's own constant, as it runs
        value = literal(source, name)
        return value if isinstance(value, (int, float)) and not isinstance(value, bool) else default

    step_us = number("HOST_US_PER_STEP", HOST_US_PER_STEP)
    host_us = forward_host_us(steps, int(number("FORWARD_TRITON", 0)), step_us,
                              number("TRITON_LAUNCH_US", TRITON_LAUNCH_US))
    return host_us > 3 * step_us


def apply_choices(source: str, config: dict[str, object]) -> str:
    """`source` with the region keys of `config` applied; with `BACKEND_KEY` set to "cublas",
    every matmul kernel of `cublas_kernels` on cuBLAS's product; with `GRAPH_KEY` False, the
    forward op by op."""
    out = apply_region_choices(source, config)
    if GRAPH_KEY in config:
        out = replace_value(out, GRAPH_KEY, bool(config[GRAPH_KEY]))
    if config.get(BACKEND_KEY) == "cublas":
        kernel_config = literal(out, "KOPT_CONFIG")
        for k in cublas_kernels(out):
            kernel_config[k]["BACKEND"] = "cublas"
        out = replace_value(out, "KOPT_CONFIG", kernel_config)
    return out

