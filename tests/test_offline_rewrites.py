"""The offline engineer's algebraic rewrites (issue 18, item 4), each on odd sizes: the
candidate against eager in the Triton interpreter, on its smoke set (other constructor sizes)
and after the weights change, and the rewrite's note (it fired) or its absence (it must not).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from kopt.harness.data import agent_provide_inputs, build_model
from kopt.phases.engineers.offline import generate_candidate
from tests.test_offline import _load_candidate
from tests.test_offline_fusion import _accepted_on_cpu, _constructor_case


def _outputs_match(case, module, input_set: str, *, perturb: bool) -> None:
    """ModelNew with the reference's weights gives the reference's outputs; with `perturb`,
    again after every weight of both is changed in place (what a training step does) and
    after a fresh state_dict is loaded into both."""
    ref = build_model(case, input_set)
    new = build_model(case, input_set, cls=module.ModelNew)
    new.load_state_dict(ref.state_dict())
    inputs = agent_provide_inputs(case, input_set, 3)

    def check(what: str) -> None:
        with torch.no_grad():
            want = ref(*inputs.args)
            got = new(*inputs.args)
        assert got.shape == want.shape, what
        scale = float(torch.nan_to_num(want, posinf=0.0, neginf=0.0).abs().max())
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-3 * scale, equal_nan=True,
                                   msg=lambda m: f"{what}: {m}")

    check("loaded weights")
    if not perturb:
        return
    with torch.no_grad():
        for p in ref.parameters():
            p.mul_(-1.7).add_(0.3)
        for p in new.parameters():
            p.mul_(-1.7).add_(0.3)
    check("weights changed in place")
    fresh = {k: torch.randn_like(v) for k, v in ref.state_dict().items()}
    ref.load_state_dict(fresh)
    new.load_state_dict(fresh)
    check("another state_dict")


def _linear_case(tmp: Path, name: str, layers: list[str], forward: list[str]):  # type: ignore[no-untyped-def]
    """A case sized by (features, hidden), whose smoke set shrinks both. Its whole-tensor
    bound is 1e-4 (float32's default: 1e-5): a rewrite reassociates the product's sums, and on
    the verifier's one-row draws the output is one element summed from terms 20 times larger;
    another float32 order lands 1e-5 from the float64 result there on some draws (CI,
    2026-11-28: 1.35e-5), which the default rejects at random."""
    return _constructor_case(tmp, name, "features, hidden", layers, forward,
                             "features: 67, hidden: 45", [13, 67],
                             "features: 19, hidden: 11", [5, 19],
                             tolerance="{atol: 1.0e-4, rtol: 1.0e-4, rel: 1.0e-4}")


SUM_CASES = {
    # KernelBench level-2 14's shape of problem: product, a divisor, a sum, a scale after
    "divide_sum": (["self.weight = nn.Parameter(torch.randn(hidden, features))"],
                   ["y = torch.matmul(x, self.weight.T) / 2", "return torch.sum(y, dim=1, keepdim=True) * 1.5"]),
    # a linear layer's bias, a per-feature scale and a shift, then a mean without keepdim
    "bias_scale_mean": (["self.fc = nn.Linear(features, hidden)",
                         "self.scale = nn.Parameter(torch.rand(hidden) + 0.5)"],
                        ["y = (self.fc(x) * self.scale - 0.25) / 3.0", "return -y.mean(dim=-1)"]),
    # the shift read from the rows themselves (a per-row term), and a reversed subtraction
    "row_shift": (["self.fc = nn.Linear(features, hidden)"],
                  ["y = 2.0 - self.fc(x)", "y = y + x[:, :1]", "return y.sum(dim=1)"]),
}


@pytest.mark.parametrize("name", sorted(SUM_CASES))
def test_sum_over_product_features_is_a_product_with_summed_weights(tmp_path: Path, name: str) -> None:
    layers, forward = SUM_CASES[name]
    case = _linear_case(tmp_path, name, layers, forward)
    result = generate_candidate(case)
    assert any(n.startswith("rewrite: ") and "output features" in n for n in result.notes), result.notes
    fused = [f for k in result.kernels for f in k["fuses"]]
    assert not any(f.startswith(("mm", "addmm", "linear")) for f in fused), result.kernels
    module = _load_candidate(result.source, tmp_path, name)
    _outputs_match(case, module, "main", perturb=True)
    _outputs_match(case, module, "smoke", perturb=True)
    _accepted_on_cpu(tmp_path, case, result.source)


CONV_CASES = {
    # a 2-D convolution, a per-channel scale, the mean over the channels, a bias after it
    "conv2d_scale_mean": (["self.conv = nn.Conv2d(3, hidden, 3, padding=1)",
                           "self.scale = nn.Parameter(torch.rand(hidden, 1, 1) + 0.5)",
                           "self.bias = nn.Parameter(torch.randn(1, 1, 1, 1))"],
                          ["y = self.conv(x) * self.scale", "return y.mean(dim=1, keepdim=True) + self.bias"],
                          [2, 3, 9, 11], [1, 3, 5, 6]),
    # a transposed 3-D convolution (its weight's dim 1 is the output channels), a shift
    "conv_transpose3d_sum": (["self.conv = nn.ConvTranspose3d(4, hidden, 3, stride=2, padding=1)"],
                             ["return (self.conv(x) - 0.5).sum(dim=1)"],
                             [2, 4, 3, 4, 5], [1, 4, 2, 3, 2]),
}


@pytest.mark.parametrize("name", sorted(CONV_CASES))
def test_sum_over_convolution_channels_is_one_channel(tmp_path: Path, name: str) -> None:
    layers, forward, main, smoke = CONV_CASES[name]
    case = _constructor_case(tmp_path, name, "hidden", layers, forward,
                             "hidden: 13", main, "hidden: 5", smoke)
    result = generate_candidate(case)
    assert any(n.startswith("rewrite: ") and "output channels" in n for n in result.notes), result.notes
    # one convolution left: the one-channel one (the model's own, now unread, is dropped), in
    # cuDNN or generated (the transposed one's 4 x 8 pairs per residue class: a `conv` kernel)
    assert result.source.count("torch.ops.aten.convolution.default(") + \
        sum(k["kind"] == "conv" for k in result.kernels) == 1
    module = _load_candidate(result.source, tmp_path, name)
    _outputs_match(case, module, "main", perturb=True)
    _outputs_match(case, module, "smoke", perturb=True)
    _accepted_on_cpu(tmp_path, case, result.source)


NOT_REWRITTEN = {
    # the scale varies along the rows: sum_n s_mn y_mn does not factor through the weights
    "row_scale": (["self.fc = nn.Linear(features, hidden)"],
                  ["y = self.fc(x) * x[:, :1]", "return y.sum(dim=1)"]),
    # a non-affine map between the product and the sum
    "sigmoid_between": (["self.fc = nn.Linear(features, hidden)"],
                        ["return torch.sigmoid(self.fc(x)).sum(dim=1)"]),
    # the product is also returned: it must be computed anyway
    "product_also_read": (["self.fc = nn.Linear(features, hidden)"],
                          ["y = self.fc(x)", "return y.sum(dim=1) + y[:, 0]"]),
    # a sum over the rows, not over the output features
    "sum_over_rows": (["self.fc = nn.Linear(features, hidden)"],
                      ["return self.fc(x).sum(dim=0)"]),
    # a division by a constant zero: the model's inf/nan, not a folded weight's
    "divide_by_zero": (["self.fc = nn.Linear(features, hidden)"],
                       ["return (self.fc(x) / 0.0).sum(dim=1)"]),
    # a grouped convolution: each output channel reads only its group's inputs
    "grouped_conv": (["self.conv = nn.Conv1d(features * 2, hidden * 2, 3, groups=2)"],
                     ["y = torch.cat([x, x], 1).unsqueeze(-1).expand(-1, -1, 5)",
                      "return self.conv(y).sum(dim=1)"]),
}


@pytest.mark.parametrize("name", sorted(NOT_REWRITTEN))
def test_sum_rewrite_leaves_what_does_not_factor(tmp_path: Path, name: str) -> None:
    layers, forward = NOT_REWRITTEN[name]
    case = _linear_case(tmp_path, name, layers, forward)
    result = generate_candidate(case)
    assert not any(n.startswith("rewrite: ") for n in result.notes), result.notes
    module = _load_candidate(result.source, tmp_path, name)
    _outputs_match(case, module, "main", perturb=False)


def test_rewrites_off_keeps_the_full_product(tmp_path: Path) -> None:
    layers, forward = SUM_CASES["divide_sum"]
    case = _linear_case(tmp_path, "rewrites_off", layers, forward)
    on, off = generate_candidate(case), generate_candidate(case, rewrites=False)
    assert any(n.startswith("rewrite: ") for n in on.notes)
    assert not any(n.startswith("rewrite: ") for n in off.notes)
    assert on.source != off.source


SIBLINGS = (["self.q = nn.Linear(features, hidden, bias=False)",
             "self.k = nn.Linear(features, 7, bias=False)",
             "self.v = nn.Linear(features, hidden, bias=False)",
             "self.o = nn.Linear(features, 5, bias=False)"],
            # q, k and v read one activation (a view of it each, as export traces them); o reads
            # another value and stays apart
            ["h = x * 2.0",
             "a, b, c = self.q(h), torch.relu(self.k(h)), self.v(h)",
             "return torch.cat([a * b.sum(-1, keepdim=True), c, self.o(x)], dim=-1)"])


def test_products_of_one_activation_are_one_product_over_their_weights(tmp_path: Path) -> None:
    """q, k and v of one activation: one product over their weights side by side, each a column
    slice of it (its widths read from the weights at run time: the smoke set's are others);
    the concatenation is kept between calls and made again when the weights change in place
    or a state_dict is loaded; the verifier accepts it."""
    layers, forward = SIBLINGS
    case = _linear_case(tmp_path, "siblings", layers, forward)
    result = generate_candidate(case)
    assert any(n.startswith("rewrite: ") and "3 weights side by side" in n for n in result.notes), result.notes
    assert result.source.count('_cached_cat(self, "q.weight+k.weight+v.weight"') == 1, result.source
    products = [k for k in result.kernels if k["kind"] == "matmul"]
    assert len(products) == 2, result.kernels  # q/k/v together, o apart
    module = _load_candidate(result.source, tmp_path, "siblings")
    _outputs_match(case, module, "main", perturb=True)
    _outputs_match(case, module, "smoke", perturb=True)
    _accepted_on_cpu(tmp_path, case, result.source)


def test_the_concatenated_weights_follow_each_weight(tmp_path: Path) -> None:
    """The kept concatenation is the same tensor while no weight changes, and a new one after
    any of them is written in place or replaced."""
    layers, forward = SIBLINGS
    case = _linear_case(tmp_path, "siblings_cache", layers, forward)
    module = _load_candidate(generate_candidate(case).source, tmp_path, "siblings_cache")
    model = build_model(case, "main", cls=module.ModelNew)
    x = agent_provide_inputs(case, "main", 3).args
    with torch.no_grad():
        model(*x)
        (kept,) = [hit[1] for hit in model._kopt_cat_weights.values()]
        model(*x)
        assert model._kopt_cat_weights["q.weight+k.weight+v.weight"][1] is kept
        model.k.weight.add_(1.0)
        model(*x)
        again = model._kopt_cat_weights["q.weight+k.weight+v.weight"][1]
    assert again is not kept
    torch.testing.assert_close(again, torch.cat([model.q.weight, model.k.weight, model.v.weight]))
    model.v.weight = torch.nn.Parameter(torch.randn_like(model.v.weight))
    with torch.no_grad():
        model(*x)
    torch.testing.assert_close(model._kopt_cat_weights["q.weight+k.weight+v.weight"][1][-model.v.weight.shape[0]:],
                               model.v.weight.detach())


def test_large_products_stay_apart(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the smallest product does SIBLING_MAX_FLOPS or more, the products stay apart (a
    large product gains nothing side by side and pays a copy of the weights in memory)."""
    from kopt.phases.engineers.offline import sibling_products

    monkeypatch.setattr(sibling_products, "SIBLING_MAX_FLOPS", 2 * 13 * 7 * 67)  # the k product's
    layers, forward = SIBLINGS
    case = _linear_case(tmp_path, "siblings_large", layers, forward)
    result = generate_candidate(case)
    assert not any("side by side" in n for n in result.notes), result.notes
    assert "_cached_cat" not in result.source
    assert len([k for k in result.kernels if k["kind"] == "matmul"]) == 4, result.kernels
