"""The KernelBench importer on tests/kernelbench/*.py, `kopt import-kernelbench` and `kopt new`.

Most tests run the probe in-process (it is a plain function; the importer runs it in a
subprocess only because user files may hang or crash); a few go through the subprocess and
the CLI end to end.
"""

from __future__ import annotations

import json
import math
import textwrap
from pathlib import Path

import pytest
import torch
import yaml

from kopt.harness.case import Case, ScalarSpec, TensorSpec, load_case_dir
from kopt.harness.data import agent_provide_inputs, build_model
from kopt.harness.errors import BadInputError
from kopt.harness.kernelbench import (
    SMOKE_MAX_NUMEL,
    derive_manifest,
    import_kernelbench,
    probe,
    scaffold_case,
    write_case,
)
from kopt.workbench.cli import main as kopt

PROBLEMS = Path(__file__).resolve().parent / "kernelbench"
FILES = sorted(PROBLEMS.glob("*.py"))


def import_in_process(file: Path, out: Path, name: str | None = None) -> Case:
    result = probe(file)
    assert result["ok"], result
    manifest = derive_manifest(result, name or file.stem, file)
    return load_case_dir(write_case(file, manifest, out / (name or file.stem)))


def write_problem(tmp_path: Path, name: str, source: str) -> Path:
    file = tmp_path / f"{name}.py"
    file.write_text(textwrap.dedent(source))
    return file


def smoke_forward(case: Case) -> torch.Tensor:
    model = build_model(case, "smoke")
    inputs = agent_provide_inputs(case, "smoke")
    with torch.no_grad():
        return model(*inputs.args, **inputs.kwargs)


def test_there_are_at_least_ten_problem_files() -> None:
    assert len(FILES) >= 10


@pytest.mark.parametrize("file", FILES, ids=[f.stem for f in FILES])
def test_every_problem_imports_with_its_exact_shapes_and_a_small_runnable_smoke_set(
        file: Path, workspace: Path) -> None:
    case = import_in_process(file, workspace / "cases")
    assert (case.directory / "model.py").read_bytes() == file.read_bytes()  # unmodified
    # The main set is exactly what get_inputs() returns.
    result = probe(file)
    main = case.input_set("main")
    for spec, info in zip(main.args, result["inputs"], strict=True):
        if info["kind"] == "tensor":
            assert isinstance(spec, TensorSpec)
            assert spec.shape == info["shape"] and spec.dtype == info["dtype"]
        else:
            assert isinstance(spec, ScalarSpec) and spec.value == info["value"]
    smoke = case.input_set("smoke")
    assert all(math.prod(s.shape) <= SMOKE_MAX_NUMEL for s in smoke.tensor_specs())
    out = smoke_forward(case)
    assert torch.isfinite(out.float()).all()
    assert case.manifest.description.startswith(f"Imported from KernelBench file {file.name}")


def test_integer_targets_use_the_class_count_constant(workspace: Path) -> None:
    case = import_in_process(PROBLEMS / "cross_entropy.py", workspace)
    logits, targets = case.input_set("main").args
    assert isinstance(targets, TensorSpec) and isinstance(logits, TensorSpec)
    assert (targets.init, targets.low, targets.high, targets.dtype) == ("randint", 0, 10, "int64")
    assert "num_classes=10" in case.manifest.description
    smoke_logits, smoke_targets = case.input_set("smoke").args
    assert smoke_logits.shape == [64, 10] and smoke_targets.shape == [64]  # type: ignore[union-attr]


def test_index_range_shrinks_with_the_table_it_indexes(tmp_path: Path, workspace: Path) -> None:
    file = write_problem(tmp_path, "embedding", """\
        import torch
        import torch.nn as nn

        class Model(nn.Module):
            def __init__(self, vocab_size, embed_dim):
                super().__init__()
                self.table = nn.Parameter(torch.randn(vocab_size, embed_dim))

            def forward(self, idx):
                return self.table[idx] * 0.5

        vocab_size = 5000
        embed_dim = 256

        def get_inputs():
            return [torch.randint(0, vocab_size, (64, 128))]

        def get_init_inputs():
            return [vocab_size, embed_dim]
    """)
    case = import_in_process(file, workspace)
    assert case.manifest.model.init_kwargs == {"vocab_size": 5000, "embed_dim": 256}
    (idx,) = case.input_set("main").args
    assert isinstance(idx, TensorSpec) and idx.high == 5000
    smoke = case.input_set("smoke")
    (small,) = smoke.args
    assert isinstance(small, TensorSpec) and small.high == smoke.init_kwargs["vocab_size"] < 5000
    assert smoke_forward(case).shape[-1] == smoke.init_kwargs["embed_dim"]  # no index error


def test_equal_sizes_shrink_together_so_matmuls_still_agree(workspace: Path) -> None:
    case = import_in_process(PROBLEMS / "bmm_scale.py", workspace)
    a, b = case.input_set("smoke").args
    assert isinstance(a, TensorSpec) and isinstance(b, TensorSpec)
    assert a.shape[2] == b.shape[1] and a.shape[0] == b.shape[0]
    assert len({a.shape[1], a.shape[2], b.shape[2]}) == 3  # m, k, n stay distinct

    linear = import_in_process(PROBLEMS / "matmul_bias_relu.py", workspace)
    smoke = linear.input_set("smoke")
    (x,) = smoke.args
    assert isinstance(x, TensorSpec)
    assert smoke.init_kwargs["in_features"] == x.shape[1] < 1024
    assert linear.manifest.model.init_kwargs == {"in_features": 1024, "out_features": 512}


def test_positional_only_constructor_keeps_its_sizes(tmp_path: Path, workspace: Path) -> None:
    file = write_problem(tmp_path, "varargs", """\
        import torch
        import torch.nn as nn

        class Model(nn.Module):
            def __init__(self, *shape):
                super().__init__()
                self.ln = nn.LayerNorm(shape[0])

            def forward(self, x):
                return self.ln(x)

        def get_inputs():
            return [torch.randn(256, 1024)]

        def get_init_inputs():
            return [1024]
    """)
    case = import_in_process(file, workspace)
    assert case.manifest.model.init_args == [1024] and case.manifest.model.init_kwargs == {}
    (x,) = case.input_set("smoke").args
    assert isinstance(x, TensorSpec) and x.shape == [64, 1024]
    assert "1024" in case.manifest.description and "kept" in case.manifest.description
    assert smoke_forward(case).shape == (64, 1024)


def test_layouts_distributions_and_plain_values_are_kept(tmp_path: Path, workspace: Path) -> None:
    file = write_problem(tmp_path, "mixed", """\
        import torch
        import torch.nn as nn

        class Model(nn.Module):
            def forward(self, a, b, mask, k, c):
                return (a + b.t()) * mask * k + c

        def get_inputs():
            return [torch.randn(96, 80) * 3 + 2, torch.rand(80, 96).t().t().t(),
                    torch.rand(96, 80) < 0.3, 0.5, torch.rand(96, 80) * 4 - 2]

        def get_init_inputs():
            return []
    """)
    case = import_in_process(file, workspace)
    a, b, mask, k, c = case.input_set("main").args
    assert isinstance(a, TensorSpec) and a.init == "normal"
    assert a.mean == pytest.approx(2.0, abs=0.1) and a.std == pytest.approx(3.0, abs=0.1)
    assert isinstance(b, TensorSpec) and b.init == "uniform" and not b.contiguous
    assert (b.low, b.high) == (0.0, 1.0)
    assert isinstance(c, TensorSpec) and (c.init, c.low, c.high) == ("uniform", -2.0, 2.0)
    assert b.shape == [96, 80]
    assert isinstance(mask, TensorSpec) and mask.dtype == "bool" and mask.init == "bernoulli"
    assert isinstance(k, ScalarSpec) and k.value == 0.5
    drawn = agent_provide_inputs(case, "main").args
    assert not drawn[1].is_contiguous() and 0 <= float(drawn[1].min())
    # The manifest on disk reads like a hand-written one: one line per tensor.
    text = (case.directory / "manifest.yaml").read_text()
    assert "- {shape: [96, 80], dtype: float32, init: normal" in text
    assert yaml.safe_load(text)["name"] == "mixed"


def test_bfloat16_inputs_keep_their_dtype(workspace: Path) -> None:
    case = import_in_process(PROBLEMS / "swish.py", workspace)
    assert [s.dtype for s in case.input_set("smoke").tensor_specs()] == ["bfloat16"]
    assert smoke_forward(case).dtype == torch.bfloat16


@pytest.mark.parametrize(("source", "says"), [
    ("import torch\nx = 1\ndef get_inputs():\n    return []\n", "defines no `class Model"),
    ("import torch.nn as nn\nclass Model(nn.Module):\n    pass\n", "defines no get_inputs()"),
    ("import nonexistent_package_xyz\n", "does not import: ModuleNotFoundError"),
    ("import torch\nimport torch.nn as nn\nclass Model(nn.Module):\n    pass\n"
     "def get_inputs():\n    return torch.randn(4, 4)\n", "returned a Tensor, not a list"),
    ("import torch.nn as nn\nclass Model(nn.Module):\n    def __init__(self, n):\n"
     "        super().__init__()\ndef get_inputs():\n    return []\n"
     "def get_init_inputs():\n    return [1, 2]\n", "Model(*get_init_inputs()) raised TypeError"),
])
def test_broken_files_are_reported_in_one_line(tmp_path: Path, source: str, says: str) -> None:
    result = probe(write_problem(tmp_path, "broken", source))
    assert not result["ok"] and says in result["error"] and result["fix"]


def test_import_runs_user_code_in_a_subprocess_and_reports_its_failure(
        tmp_path: Path, workspace: Path) -> None:
    file = write_problem(tmp_path, "raises", """\
        import torch
        import torch.nn as nn

        class Model(nn.Module):
            def forward(self, x):
                return x

        def get_inputs():
            raise RuntimeError("CUDA out of memory")

        def get_init_inputs():
            return []
    """)
    with pytest.raises(BadInputError) as err:
        import_kernelbench(file)
    line = err.value.one_line()
    assert str(file) in line and "get_inputs() raised RuntimeError: CUDA out of memory" in line
    assert "\n" not in line
    assert not (workspace / "cases" / "raises").exists()


def test_cli_imports_into_the_workspace_and_refuses_to_overwrite(
        workspace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    file = PROBLEMS / "softmax.py"
    assert kopt(["import-kernelbench", str(file), "--name", "sm", "--json"]) == 0
    reply = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert reply["path"] == str(workspace / "cases" / "sm")
    assert reply["manifest"]["inputs"]["args"][0]["shape"] == [256, 4096]
    assert load_case_dir(workspace / "cases" / "sm").name == "sm"
    assert kopt(["import-kernelbench", str(file), "--name", "sm"]) == 2
    assert "already holds a case" in capsys.readouterr().err
    assert kopt(["import-kernelbench", str(workspace / "missing.py")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("kopt: error: ") and "missing.py: no such file" in err
    assert kopt(["import-kernelbench", str(file), "--name", "bad name"]) == 2


def test_new_scaffolds_a_case_that_loads_and_runs(
        workspace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert kopt(["new", "mycase", "--json"]) == 0
    reply = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    case = load_case_dir(Path(reply["path"]))
    assert case.name == "mycase" and case.directory == workspace / "cases" / "mycase"
    assert case.input_set_names() == ["main", "smoke", "shape0"]
    assert smoke_forward(case).shape == (64, 256)
    assert kopt(["new", "mycase"]) == 2  # refuses to overwrite
    assert "already holds a case" in capsys.readouterr().err
    custom = scaffold_case("other", workspace / "elsewhere")
    assert (custom / "model.py").is_file() and load_case_dir(custom).name == "other"
    with pytest.raises(BadInputError):
        scaffold_case("no/slash")
