"""Weights drawn like inputs: fresh state_dicts for a verification, from secret seeds.

The baseline's deterministic weights (`harness.data.agent_provide_weights(case, set, 0)`) stay
for timing and for the caches; a verification draws its own, from seeds drawn here and never
sent anywhere, with the case's own initialiser (`weights.function`, else the module's default
init), so a candidate that bakes the seeded weights into its source, rebuilds them from the
case's seed, or keeps the first weights it saw is wrong on them.

A parameter the initialiser sets to a constant (a LayerNorm's weight of ones, a bias of zeros)
would come out identical from every seed, and a kernel that ignores it would never be caught;
a trained model's values are not the initialiser's. Such a floating-point *parameter* gets a
small perturbation: `x * exp(0.1 * N(0, 1))` where it is non-zero (its sign and scale kept),
`0.1 * N(0, 1)` where it is zero. Buffers keep their initial values (a causal mask, a table of
positions, BatchNorm's running statistics): they are often constants by design, and a kernel
may rebuild them from indices.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

import torch

from kopt.harness.case import Case, ResolvedInputSet
from kopt.harness.data import agent_provide_weights, instantiate, model_class
from kopt.harness.verification.tensors import bitwise_equal

PERTURB_STD = 0.1
"""Relative spread of the perturbation given to constant-initialised parameters."""


@dataclass
class WeightPair:
    """Two fresh state_dicts for one set of constructor arguments (`a` loaded first; `b` is
    what `depends_on_weights` loads into the same instance afterwards)."""

    a: dict[str, torch.Tensor]
    b: dict[str, torch.Tensor]
    perturbed: list[str]
    """Parameters the initialiser sets to a constant, perturbed in both."""


def parameter_names(case: Case, resolved: ResolvedInputSet) -> set[str]:
    """state_dict keys that are `nn.Parameter`s (not buffers), from an instance on `meta`."""
    cls = model_class(case)
    try:
        with torch.device("meta"):
            model = instantiate(cls, resolved, case.model_file)
    except Exception:  # a constructor that cannot run on meta: build it for real
        model = instantiate(cls, resolved, case.model_file)
    params = {name for name, _ in model.named_parameters()}
    return {k for k in model.state_dict() if k in params}


def parameter_count(case: Case, resolved: ResolvedInputSet) -> int:
    """Elements in the model's state_dict for these constructor arguments (from `meta`)."""
    cls = model_class(case)
    try:
        with torch.device("meta"):
            model = instantiate(cls, resolved, case.model_file)
    except Exception:
        return 0
    return sum(t.numel() for t in model.state_dict().values() if isinstance(t, torch.Tensor))


def _perturb(t: torch.Tensor) -> torch.Tensor:
    gen = torch.Generator().manual_seed(secrets.randbits(62))
    noise = torch.randn(t.shape, generator=gen, dtype=torch.float32) * PERTURB_STD
    x = t.float()
    out = torch.where(x == 0, noise, x * noise.exp())
    return out.to(t.dtype)


def draw_pair(case: Case, input_set: str) -> WeightPair:
    """Two state_dicts for `input_set`'s constructor arguments, each from a secret seed."""
    a = agent_provide_weights(case, input_set, secrets.randbits(62), cache=False)
    b = agent_provide_weights(case, input_set, secrets.randbits(62), cache=False)
    params = parameter_names(case, case.input_set(input_set))
    perturbed = []
    for k in a:
        if (k in params and a[k].dtype.is_floating_point and a[k].numel()
                and bitwise_equal(a[k], b[k])):
            a[k], b[k] = _perturb(a[k]), _perturb(b[k])
            perturbed.append(k)
    return WeightPair(a, b, perturbed)
