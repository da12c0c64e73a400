"""A constructor's large draws on every core (harness.parallel_fills): the distribution and its
parameters are torch's, a seed still names one state_dict, and what the mode does not take
is drawn by torch as before."""

from __future__ import annotations

import math

import pytest
import torch

from kopt.harness import parallel_fills
from kopt.harness.parallel_fills import ParallelFills


@pytest.fixture(autouse=True)
def _small_sizes(monkeypatch: pytest.MonkeyPatch) -> None:
    # a 300 x 700 weight (210 000 elements) is "large" here, in 4 096-element chunks (52)
    monkeypatch.setattr(parallel_fills, "MIN_ELEMENTS", 1 << 16)
    monkeypatch.setattr(parallel_fills, "CHUNK", 1 << 12)


def _linear(seed: int, parallel: bool) -> torch.nn.Linear:
    torch.manual_seed(seed)
    if not parallel:
        return torch.nn.Linear(700, 300)
    with ParallelFills():
        return torch.nn.Linear(700, 300)


def test_a_seed_names_one_state_dict_and_the_bound_is_kaimings() -> None:
    a, b, c = _linear(3, True), _linear(3, True), _linear(4, True)
    assert torch.equal(a.weight, b.weight) and torch.equal(a.bias, b.bias)
    assert not torch.equal(a.weight, c.weight)
    bound = 1 / math.sqrt(700)  # nn.Linear: kaiming_uniform_(a=sqrt(5)) -> 1/sqrt(fan_in)
    w = a.weight.detach()
    assert w.min() >= -bound and w.max() <= bound
    assert w.min() < -0.99 * bound and w.max() > 0.99 * bound
    # uniform on [-bound, bound]: mean 0, std bound/sqrt(3); chunks are not copies of each other
    assert abs(w.mean().item()) < 0.01 * bound
    assert w.std().item() == pytest.approx(bound / math.sqrt(3), rel=0.01)
    flat = w.reshape(-1)
    assert not torch.equal(flat[:4096], flat[4096:8192])
    plain = _linear(3, False).weight.detach()
    assert plain.std().item() == pytest.approx(w.std().item(), rel=0.01)


def test_normal_and_uniform_keep_their_parameters() -> None:
    t = torch.empty(400, 500)
    u = torch.empty(400, 500)
    torch.manual_seed(0)
    with ParallelFills():
        torch.nn.init.normal_(t, mean=2.0, std=0.5)
        torch.nn.init.uniform_(u, -3.0, 7.0)
    assert t.mean().item() == pytest.approx(2.0, abs=0.01)
    assert t.std().item() == pytest.approx(0.5, rel=0.01)
    assert u.min() >= -3.0 and u.max() <= 7.0
    assert u.mean().item() == pytest.approx(2.0, abs=0.05)


def test_what_the_mode_does_not_take_is_torchs_own_draw() -> None:
    small = torch.empty(10, 10)
    gen_a, gen_b = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    big = torch.empty(400, 500)
    strided = torch.empty(500, 400).t()
    with ParallelFills():
        torch.manual_seed(1)
        torch.nn.init.uniform_(small)
        torch.nn.init.normal_(big, generator=gen_a)  # an explicit generator: torch's
        torch.nn.init.uniform_(strided)  # not contiguous: torch's
    torch.manual_seed(1)
    assert torch.equal(small, torch.empty(10, 10).uniform_())
    assert torch.equal(big, torch.empty(400, 500).normal_(generator=gen_b))
    assert strided.min() >= 0 and strided.max() <= 1
