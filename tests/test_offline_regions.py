"""Per-region switch of offline candidates (issue 18, part 3): every generated region also
has a PyTorch form in forward, picked by KOPT_REGIONS at each call, so the accelerator can
time each region both ways and keep the faster. Checked in the Triton interpreter.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kopt.harness.case import load_case, load_case_dir
from kopt.harness.errors import EngineerError
from kopt.phases.engineers.offline import generate_candidate
from kopt.phases.engineers.offline.fallback import TorchRegion
from kopt.phases.engineers.offline.fusion import Group
from kopt.phases.engineers.offline.graph import Node
from kopt.phases.engineers.offline.regions import SWITCH, regions, with_choices
from tests.test_offline import _check_case, _load_candidate, _write_case


def _forbid(module, name: str) -> None:
    def boom(*args, **kwargs):
        raise AssertionError(f"{name} launched while its region is switched to torch")
    setattr(module, name, boom)


@pytest.mark.parametrize("name", ["cross_entropy", "gated_mlp", "layernorm_gelu"])
def test_each_region_switched_to_torch_still_matches(name: str, tmp_path: Path) -> None:
    case = load_case(name)
    result = generate_candidate(case, input_set="smoke")
    found = regions(result.source)
    assert sorted(r.name for r in found) == [f"g{i}" for i in range(len(result.kernels))]
    assert all(r.choice == "triton" and r.kernels for r in found)
    for region in found:
        module = _load_candidate(result.source, tmp_path, f"{name}_{region.name}")
        getattr(module, SWITCH)[region.name] = "torch"
        _forbid(module, f"_launch_{region.name}")
        _check_case(case, module, "smoke")


def test_switch_in_the_file_and_all_torch_is_refused(tmp_path: Path) -> None:
    body = ["s = torch.softmax(x, dim=0)", "return s * y + x.mean(dim=1, keepdim=True)"]
    case = load_case_dir(_write_case(tmp_path, body, [[17, 29], [17, 29]], "float32"))
    result = generate_candidate(case)
    names = [r.name for r in regions(result.source)]
    assert len(names) >= 2, names
    source = with_choices(result.source, {names[0]: "torch"})
    assert [r.choice for r in regions(source)] == ["torch"] + ["triton"] * (len(names) - 1)
    module = _load_candidate(source, tmp_path, "switched")
    _forbid(module, f"_launch_{names[0]}")
    _check_case(case, module, "main")
    with pytest.raises(EngineerError, match="every region would run in PyTorch"):
        with_choices(source, {n: "torch" for n in names})
    with pytest.raises(EngineerError, match="no region"):
        with_choices(source, {"g99": "torch"})


def test_a_region_in_pytorch_copies_only_an_output_that_may_alias(tmp_path: Path) -> None:
    """A region's torch form returns fresh memory, as its kernel does: a computed result is
    fresh already (copying it again was a pass over the output: 3.54 -> 3.74 ms for a
    transposed conv's region, H200), a view of an input is copied."""
    body = ["s = torch.softmax(x, dim=0)", "return s * y + x.mean(dim=1, keepdim=True)"]
    case = load_case_dir(_write_case(tmp_path, body, [[17, 29], [17, 29]], "float32"))
    result = generate_candidate(case)
    outputs = [line.strip() for line in result.source.splitlines()
               if "memory_format=torch.contiguous_format" in line and "= t_" in line]
    assert outputs and not any("copy=True" in line for line in outputs), outputs

    x = Node("x", "input")
    view, neg = Node("x_view", "view", [x]), Node("neg", "neg", [x])
    group = Group(0, "pointwise", (4,), (4,), nodes=[view, neg])
    region = TorchRegion(group, None, {}, None, None)
    assert region.aliases(view) and not region.aliases(neg) and region.aliases(x)


def test_the_accelerator_searches_each_region_triton_or_torch_first(tmp_path: Path) -> None:
    """The accelerator's space puts one Triton-or-PyTorch dimension per region before the
    kernels' launch parameters; a configuration with every region in PyTorch is refused
    untimed; with a faked timer the search keeps the slow region in PyTorch."""
    from kopt.phases.accelerator import apply_config, search_space
    from kopt.phases.search import CoordinateSearch, time_files

    body = ["s = torch.softmax(x, dim=0)", "return s * y + x.mean(dim=1, keepdim=True)"]
    case = load_case_dir(_write_case(tmp_path, body, [[17, 29], [17, 29]], "float32"))
    source = generate_candidate(case).source
    names = [r.name for r in regions(source)]
    style, space, default = search_space(source, None)
    keys = [f"{SWITCH}/{n}" for n in names]
    assert style == "config" and list(space)[:len(keys)] == keys
    assert all(space[k] == ["triton", "torch"] and default[k] == "triton" for k in keys)
    assert len(space) > len(keys)  # the launch parameters follow
    with pytest.raises(EngineerError, match="every region"):
        apply_config(source, style, {**default, **{k: "torch" for k in keys}})

    def file_of(config):  # type: ignore[no-untyped-def]
        return apply_config(source, style, config)

    def time_paths(texts):  # type: ignore[no-untyped-def]
        out = []
        for text in texts:
            choice = {r.name: r.choice for r in regions(text)}
            ms = 3.0 - (1.0 if choice[names[0]] == "torch" else 0.0) \
                + (1.0 if choice[names[1]] == "torch" else 0.0)
            out.append({"checked": True, "median_ms": ms, "p20_ms": ms, "p80_ms": ms})
        return out

    search = CoordinateSearch({k: space[k] for k in keys},
                              lambda c, _w: time_files(c, file_of, time_paths)[0], max_trials=20)
    start, row = search.start([("default", {k: default[k] for k in keys})])
    best, _ = search.run(start, row)
    assert best[keys[0]] == "torch" and best[keys[1]] == "triton"
    rows, files = time_files([{k: "torch" for k in keys}], file_of, time_paths)
    assert files == [None] and not rows[0]["checked"] and "every region" in rows[0]["detail"]


@pytest.mark.parametrize("conv, bias", [("nn.Conv2d(c, c, 5, stride=2, padding=2, groups=c, bias=False)", False),
                                        ("nn.Conv1d(c, c, 3, padding=1, groups=c)", True)])
def test_a_region_of_library_ops_falls_back_to_the_library_calls(tmp_path: Path, conv: str,
                                                                 bias: bool) -> None:
    """A depthwise convolution lowered to window taps and an eval batch norm lowered to its
    affine steps are, in their region's PyTorch form, `conv{d}d` and `batch_norm`: one cuDNN
    call and one pass each, not 25 slices and a pass per step (an MBConv block's depthwise
    region on an H200 had only the tap-by-tap form to fall back on: the block ran 0.89x
    eager). The region switched to PyTorch still matches, weights changed included."""
    from tests.test_offline_fusion import _constructor_case

    dims = 2 if "Conv2d" in conv else 1
    main, smoke = ([2, 6, 13, 11], [1, 4, 9, 10]) if dims == 2 else ([3, 5, 23], [2, 3, 17])
    case = _constructor_case(
        tmp_path, f"lib{dims}d", "c", [f"self.conv = {conv}", f"self.bn = nn.BatchNorm{dims}d(c)"],
        ["return torch.nn.functional.relu6(self.bn(self.conv(x)))"],
        f"c: {main[1]}", main, f"c: {smoke[1]}", smoke)
    result = generate_candidate(case)
    found = regions(result.source)
    assert len(found) == 1
    torch_form = result.source.split('if KOPT_REGIONS["g0"] == "triton":')[1].split("else:", 1)[1]
    torch_form = torch_form.split("return ")[0]
    assert f"torch.nn.functional.conv{dims}d(" in torch_form, torch_form
    assert "torch.nn.functional.batch_norm(" in torch_form, torch_form
    assert "window_tap" not in torch_form and "pad(" not in torch_form, torch_form
    module = _load_candidate(result.source, tmp_path, f"lib{dims}d_torch")
    getattr(module, SWITCH)["g0"] = "torch"
    _forbid(module, "_launch_g0")
    _check_case(case, module, "smoke")
    _check_case(case, module, "main", seed=3)


@pytest.mark.parametrize("pool", ["nn.MaxPool2d(3, stride=2, padding=1)", "nn.AvgPool2d(2)",
                                  "nn.MaxPool2d(2, ceil_mode=True)",
                                  "nn.AvgPool2d(3, stride=2, padding=1)"])
def test_a_pooling_region_falls_back_to_the_pooling_call(tmp_path: Path, pool: str) -> None:
    """A pooling lowered to taps is, in its region's PyTorch form, the pooling call itself
    (one pass, as eager), not a padded slice per tap; switched to PyTorch it still matches."""
    from tests.test_offline_fusion import _constructor_case

    case = _constructor_case(
        tmp_path, "pooled", "c", [f"self.pool = {pool}"],
        ["return torch.relu(self.pool(x) * 2.0) + 1.0"],
        "c: 3", [2, 3, 13, 11], "c: 2", [1, 2, 9, 10])
    result = generate_candidate(case)
    kind = "max_pool2d(" if "Max" in pool else "avg_pool2d("
    forms = [part.split("else:", 1)[1] for part in result.source.split('if KOPT_REGIONS["')[1:]]
    assert any(f"torch.nn.functional.{kind}" in f for f in forms), result.source[-3000:]
    for region in regions(result.source):
        module = _load_candidate(result.source, tmp_path, f"pool_{region.name}")
        getattr(module, SWITCH)[region.name] = "torch"
        _forbid(module, f"_launch_{region.name}")
        _check_case(case, module, "smoke")
        _check_case(case, module, "main", seed=3)


def test_a_causal_mask_from_shapes_runs_in_its_pytorch_region(tmp_path: Path) -> None:
    """`torch.triu(ones(t, t, dtype=bool), 1)` lowers to comparisons of aranges and-ed with a
    constant `True`: the region's PyTorch form hands torch.logical_and tensors on both sides
    (a Python bool there was a TypeError on the H200, 2026-12-03, in a grouped-query
    attention's region search)."""
    body = ["t = x.shape[-1]",
            "mask = torch.triu(torch.ones(t, t, dtype=torch.bool, device=x.device), 1)",
            "return torch.softmax(x.masked_fill(mask, float('-inf')) + y, dim=-1)"]
    case = load_case_dir(_write_case(tmp_path, body, [[2, 9, 9], [2, 9, 9]], "float32"))
    result = generate_candidate(case)
    assert "logical_and" in result.source, "the mask's lowering this test is about"
    for region in regions(result.source):
        module = _load_candidate(result.source, tmp_path, f"mask_{region.name}")
        getattr(module, SWITCH)[region.name] = "torch"
        _check_case(case, module, "main")
