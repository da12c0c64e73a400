"""Issue 20: `kopt export`'s package patches a freshly built model (other random weights) in
place, and refuses a model whose structure differs, naming the first difference.

CPU only: the offline engineer's candidate for each bundled whole model is generated on the
smoke inputs, exported, applied to a new instance of the case's own class, and compared with
the unpatched model (Triton interpreter).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch

from kopt.harness.case import load_case
from kopt.harness.compare import compare_outputs
from kopt.harness.data import agent_provide_inputs, instantiate, load_model_module, model_class
from kopt.harness.tolerance import tolerance_for
from kopt.phases.engineers.offline import generate_candidate
from kopt.phases.export import build_package, module_settings

MODELS = ["gpt2_block", "llama_block", "resnet_block"]


def import_package(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(path.name, path / "__init__.py",
                                                  submodule_search_locations=[str(path)])
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.name] = module
    spec.loader.exec_module(module)
    return module


def fresh_model(case, input_set: str = "smoke", seed: int = 1234, **overrides) -> torch.nn.Module:
    """A new instance of the user's class with its own random weights (not the harness's)."""
    resolved = case.input_set(input_set)
    kwargs = {**resolved.init_kwargs, **overrides}
    torch.manual_seed(seed)
    model = model_class(case)(*resolved.init_args, **kwargs)
    if case.manifest.weights is not None:
        getattr(load_model_module(case), case.manifest.weights.function)(model)
    return model.eval()


@pytest.fixture(scope="module")
def packages(tmp_path_factory: pytest.TempPathFactory) -> dict[str, ModuleType]:
    out = {}
    root = tmp_path_factory.mktemp("exports")
    for name in MODELS:
        case = load_case(name)
        source = generate_candidate(case, input_set="smoke").source
        result = build_package(case, source, root / f"kopt_{name}", input_set="smoke",
                               run_id="test", commit="0" * 40)
        assert {"__init__.py", "kernels.py", "case.json", "README.md"} <= {
            p.name for p in result.path.iterdir()}
        out[name] = import_package(result.path)
    return out


@pytest.mark.parametrize("name", MODELS)
def test_apply_patches_a_fresh_model_in_place_keeping_its_weights(
        name: str, packages: dict[str, ModuleType], workspace: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    case = load_case(name)
    pkg = packages[name]
    model = fresh_model(case)
    inputs = agent_provide_inputs(case, "smoke", seed=3)
    with torch.no_grad():
        expected = model(*inputs.args)
    params = [id(p) for p in model.parameters()]
    keys = list(model.state_dict())

    assert pkg.apply(model) is model
    calls = []
    forward = pkg.ModelNew.forward
    monkeypatch.setattr(pkg.ModelNew, "forward",
                        lambda self, *a, **k: calls.append(1) or forward(self, *a, **k))
    with torch.no_grad():
        got = model(*inputs.args)
    assert calls, "the patched model did not run the candidate's forward"
    comparison = compare_outputs([got], [expected], tolerance_for(case, expected.dtype))
    assert comparison.ok, comparison.to_text()
    assert [id(p) for p in model.parameters()] == params
    assert list(model.state_dict()) == keys

    # Weights changed after apply are seen by the kernels (shared, not copied).
    with torch.no_grad():
        next(model.parameters()).mul_(0.5)
        changed = model(*inputs.args)
    pkg.unapply(model)
    assert "forward" not in model.__dict__
    with torch.no_grad():
        reference = model(*inputs.args)
    comparison = compare_outputs([changed], [reference], tolerance_for(case, reference.dtype))
    assert comparison.ok, comparison.to_text()
    assert not torch.equal(reference, expected)


@pytest.mark.parametrize("name", MODELS)
def test_apply_refuses_a_model_of_another_width_naming_the_key(
        name: str, packages: dict[str, ModuleType]) -> None:
    case = load_case(name)
    wider = {"gpt2_block": {"n_embd": 192, "n_head": 3}, "llama_block": {"hidden": 128},
             "resnet_block": {"channels": 12}}[name]
    model = fresh_model(case, **wider)
    with pytest.raises(ValueError, match=r"state_dict key '[\w.]+' has shape \(.*\), the case's has"):
        packages[name].apply(model)
    assert "_kopt_patch" not in model.__dict__


def test_apply_refuses_same_weights_with_other_head_count(packages: dict[str, ModuleType]) -> None:
    """Equal state_dict shapes, different structure: 4 heads of 32 instead of 2 of 64."""
    case = load_case("gpt2_block")
    model = fresh_model(case, n_head=4)
    with pytest.raises(ValueError, match=r"attribute 'n_head' of the model is 4, the case's is 2"):
        packages["gpt2_block"].apply(model)


def test_module_settings_agree_with_the_package_copy(packages: dict[str, ModuleType]) -> None:
    case = load_case("llama_block")
    with torch.device("meta"):
        model = instantiate(model_class(case), case.input_set("smoke"), case.model_file)
    assert module_settings(model) == packages["llama_block"].module_settings(model)
    assert module_settings(model)["(model)"]["n_kv_heads"] == 1


def test_apply_hands_the_models_non_persistent_buffers_to_the_kernels(tmp_path: Path) -> None:
    """A rotary embedding's tables are non-persistent buffers, outside the state_dict: the
    patched forward reads the instance's own tables at every call (one the user rebuilds, for
    a longer context, is followed), never values embedded when the kernels were generated."""
    from tests.test_model_state import ROTARY_FORWARD, ROTARY_LAYERS
    from tests.test_offline_fusion import _constructor_case

    case = _constructor_case(tmp_path, "rotary", "max_seq, dim", ROTARY_LAYERS, ROTARY_FORWARD,
                             "max_seq: 64, dim: 32", [2, 48, 32], "max_seq: 24, dim: 16", [2, 20, 16])
    source = generate_candidate(case, input_set="smoke").source
    result = build_package(case, source, tmp_path / "kopt_rotary", input_set="smoke",
                           run_id="test", commit="0" * 40)
    package = import_package(result.path)
    model = fresh_model(case)
    x = agent_provide_inputs(case, "smoke").args[0]
    with torch.no_grad():
        want = model(x)
        package.apply(model)
        torch.testing.assert_close(model(x), want, atol=1e-5, rtol=1e-5)
        model.cos = model.cos * 0.5  # the user's own table, replaced on the instance
        package.unapply(model)
        want = model(x)
        package.apply(model)
        torch.testing.assert_close(model(x), want, atol=1e-5, rtol=1e-5)
