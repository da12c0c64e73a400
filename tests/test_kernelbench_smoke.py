"""Smoke sizing of imported problems (issue 22): every smoke set written was built and run,
sizes that constructor arguments tie together stay consistent, and the largest tensor an op
produces stays within SMOKE_OP_BUDGET.

The problems are written here (not copied from KernelBench); each ties sizes together the
way real problems do. The probe and the sizing search run in-process (the importer runs them
in a subprocess only because user files may hang or crash).
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
import torch

from kopt.harness.case import Case, TensorSpec, load_case_dir
from kopt.harness.data import agent_provide_inputs, build_model
from kopt.harness.kernelbench import (
    SMOKE_OP_BUDGET,
    derive_case,
    probe,
    write_case,
)
from kopt.harness.memory import largest_op_output
from kopt.workbench.cli import main as kopt


def write_problem(tmp_path: Path, name: str, source: str) -> Path:
    file = tmp_path / f"{name}.py"
    file.write_text(textwrap.dedent(source))
    return file


def import_in_process(file: Path, out: Path) -> tuple[Case, dict]:
    result = probe(file)
    assert result["ok"], result
    manifest, report = derive_case(result, file.stem, file)
    return load_case_dir(write_case(file, manifest, out / file.stem)), report.to_dict()


def smoke_forward(case: Case) -> tuple[torch.Tensor, int]:
    model = build_model(case, "smoke")
    inputs = agent_provide_inputs(case, "smoke")
    with torch.no_grad():
        out, largest, _, _ = largest_op_output(lambda: model(*inputs.args, **inputs.kwargs))
    return out, largest


GROUPNORM = """\
    import torch
    import torch.nn as nn

    class Model(nn.Module):
        def __init__(self, in_features, out_features, num_groups):
            super().__init__()
            self.gemm = nn.Linear(in_features, out_features)
            self.norm = nn.GroupNorm(num_groups, out_features)

        def forward(self, x):
            return torch.sigmoid(self.norm(self.gemm(x)))

    batch_size = 1024
    in_features = 8192
    out_features = 8192
    num_groups = 64

    def get_inputs():
        return [torch.rand(batch_size, in_features)]

    def get_init_inputs():
        return [in_features, out_features, num_groups]
"""

HEADS = """\
    import torch
    import torch.nn as nn

    class Model(nn.Module):
        def __init__(self, embed_dim, num_heads):
            super().__init__()
            self.attn = nn.MultiheadAttention(embed_dim, num_heads, batch_first=True)

        def forward(self, x):
            return self.attn(x, x, x, need_weights=False)[0]

    embed_dim = 1536
    num_heads = 24

    def get_inputs():
        return [torch.randn(16, 300, embed_dim)]

    def get_init_inputs():
        return [embed_dim, num_heads]
"""

BIAS_SHAPE = """\
    import torch
    import torch.nn as nn

    class Model(nn.Module):
        def __init__(self, in_channels, out_channels, kernel_size, bias_shape):
            super().__init__()
            self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
            self.bias = nn.Parameter(torch.randn(bias_shape))

        def forward(self, x):
            return torch.tanh(self.conv(x) + self.bias)

    batch_size = 128
    in_channels = 96
    out_channels = 192
    height = width = 128
    kernel_size = 3
    bias_shape = (out_channels, 1, 1)

    def get_inputs():
        return [torch.randn(batch_size, in_channels, height, width)]

    def get_init_inputs():
        return [in_channels, out_channels, kernel_size, bias_shape]
"""

BIG_KERNEL = """\
    import torch
    import torch.nn as nn

    class Model(nn.Module):
        def __init__(self, channels, kernel_size, pool):
            super().__init__()
            self.conv = nn.Conv2d(3, channels, kernel_size)
            self.pool = nn.MaxPool2d(pool)

        def forward(self, x):
            return self.pool(torch.relu(self.conv(x))).mean(dim=(2, 3))

    def get_inputs():
        return [torch.rand(256, 3, 700, 700)]

    def get_init_inputs():
        return [48, 15, 12]
"""

UPSAMPLING = """\
    import torch
    import torch.nn as nn

    class Model(nn.Module):
        def __init__(self, in_channels, out_channels, kernel_size, stride, groups):
            super().__init__()
            self.up = nn.ConvTranspose3d(in_channels, out_channels, kernel_size, stride=stride)
            self.norm = nn.GroupNorm(groups, out_channels)

        def forward(self, x, residual):
            return torch.softmax(self.norm(self.up(x)), dim=1) + residual

    batch_size = 32
    in_channels = 32
    out_channels = 64
    D = 16
    stride = 2

    def get_inputs():
        return [torch.rand(batch_size, in_channels, D, D, D),
                torch.rand(batch_size, out_channels, D * stride, D * stride, D * stride)]

    def get_init_inputs():
        return [in_channels, out_channels, stride, stride, 16]
"""


@pytest.mark.parametrize(("name", "source"), [
    ("groupnorm_64_groups", GROUPNORM), ("heads_divide_width", HEADS),
    ("bias_shape_follows_channels", BIAS_SHAPE), ("kernel_larger_than_shrunk_image", BIG_KERNEL),
    ("upsampling_with_a_residual_of_twice_the_size", UPSAMPLING),
])
def test_tied_sizes_give_a_smoke_model_that_builds_runs_and_fits_the_budget(
        name: str, source: str, tmp_path: Path, workspace: Path) -> None:
    case, report = import_in_process(write_problem(tmp_path, name, source), workspace)
    assert case.manifest.smoke is not None, report
    assert report["within_budget"], report
    out, largest = smoke_forward(case)
    assert torch.isfinite(out).all()
    assert largest <= SMOKE_OP_BUDGET
    # The smoke set is smaller than the main one, and the description says what was chosen.
    main, smoke = case.input_set("main"), case.input_set("smoke")
    assert sum(s.shape[0] * s.shape[-1] for s in smoke.tensor_specs()) < \
        sum(s.shape[0] * s.shape[-1] for s in main.tensor_specs())
    assert "Smoke sizes" in case.manifest.description and "largest op output" in case.manifest.description


def test_group_count_divides_the_shrunk_width(tmp_path: Path, workspace: Path) -> None:
    case, _ = import_in_process(write_problem(tmp_path, "gn", GROUPNORM), workspace)
    smoke = case.input_set("smoke")
    width = smoke.init_kwargs["out_features"]
    assert width < 8192 and width % smoke.init_kwargs["num_groups"] == 0
    (x,) = smoke.args
    assert isinstance(x, TensorSpec) and x.shape[1] == smoke.init_kwargs["in_features"]


def test_bias_shape_shrinks_with_its_channels(tmp_path: Path, workspace: Path) -> None:
    case, _ = import_in_process(write_problem(tmp_path, "bias", BIAS_SHAPE), workspace)
    smoke = case.input_set("smoke")
    assert smoke.init_kwargs["bias_shape"] == [smoke.init_kwargs["out_channels"], 1, 1]
    assert smoke.init_kwargs["out_channels"] < 192


BATCH_EQUALS_A_TIED_WIDTH = """\
    import torch
    import torch.nn as nn

    class Model(nn.Module):
        def __init__(self, features):
            super().__init__()
            self.norm = nn.LayerNorm(features)

        def forward(self, x):
            return torch.relu(self.norm(torch.cat([x, x.flip(-1)], dim=-1)))

    batch_size = 32
    seq = 2048
    width = 32
    features = 64

    def get_inputs():
        return [torch.rand(batch_size, seq, width)]

    def get_init_inputs():
        return [features]
"""


def test_a_batch_equal_to_a_tied_width_shrinks_by_position(tmp_path: Path, workspace: Path) -> None:
    """Sizes shrink by value; here the batch (32) is also the width that the LayerNorm ties to
    its constructor argument (64 = 2 * 32) through the forward, so every by-value sizing fails.
    The batch then shrinks alone, at dim 0, and the width keeps its size."""
    case, report = import_in_process(write_problem(tmp_path, "tied", BATCH_EQUALS_A_TIED_WIDTH),
                                     workspace)
    assert case.manifest.smoke is not None, report
    (x,) = case.input_set("smoke").args
    assert isinstance(x, TensorSpec) and x.shape[0] < 32 and x.shape[-1] == 32
    out, largest = smoke_forward(case)
    assert torch.isfinite(out).all() and largest < 32 * 2048 * 64
    assert "at dim 0 only" in case.manifest.description


def test_sizes_that_share_a_tied_value_shrink_one_dim_at_a_time(tmp_path: Path, workspace: Path) -> None:
    """Every size is 32 and the last one is tied to the LayerNorm (64 = 2 * 32): no sizing by
    value runs, the batch alone still leaves the forward over budget, so the other dims shrink
    by position, one at a time, each kept only when the model still runs (KernelBench level-2
    34: 4.2 M -> 0.5 M elements in its largest op output)."""
    problem = BATCH_EQUALS_A_TIED_WIDTH.replace("torch.rand(batch_size, seq, width)",
                                                "torch.rand(batch_size, width, width, width)")
    case, report = import_in_process(write_problem(tmp_path, "cube", problem), workspace)
    assert case.manifest.smoke is not None, report
    (x,) = case.input_set("smoke").args
    assert isinstance(x, TensorSpec) and x.shape[0] < 32 and x.shape[-1] == 32, x.shape
    assert min(x.shape[1:3]) < 32, x.shape
    out, largest = smoke_forward(case)
    assert torch.isfinite(out).all() and largest <= SMOKE_OP_BUDGET, largest
    assert "by position" in case.manifest.description


def test_a_problem_no_sizing_can_run_gets_no_smoke_set_and_says_why(
        tmp_path: Path, workspace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    file = write_problem(tmp_path, "fixed", """\
        import torch
        import torch.nn as nn

        class Model(nn.Module):
            def forward(self, x):
                if x.shape != (4096, 256):
                    raise ValueError(f"expects (4096, 256), got {tuple(x.shape)}")
                return x * 2

        def get_inputs():
            return [torch.randn(4096, 256)]

        def get_init_inputs():
            return []
    """)
    assert kopt(["import-kernelbench", str(file), "--json"]) == 0
    captured = capsys.readouterr()
    reply = json.loads(captured.out.strip().splitlines()[-1])
    assert "smoke" not in reply["manifest"]
    assert "NO SMOKE SET" in reply["manifest"]["description"]
    assert "expects (4096, 256)" in reply["manifest"]["description"]
    assert reply["smoke"]["warning"].startswith("no smoke set")
    assert kopt(["import-kernelbench", str(file), "--name", "fixed2"]) == 0
    assert "warning: no smoke set" in capsys.readouterr().out


def test_new_from_a_users_module_with_shapes_on_the_command_line(
        tmp_path: Path, workspace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    file = write_problem(tmp_path, "mine", """\
        import torch
        import torch.nn as nn

        class Gate(nn.Module):
            def __init__(self, hidden=300):
                super().__init__()
                self.proj = nn.Linear(hidden, hidden)

            def forward(self, x, y):
                return torch.sigmoid(self.proj(x)) * y
    """)
    assert kopt(["new", "gate", "--from", f"{file}:Gate", "--inputs", "512x300:float32,512x300",
                 "--json"]) == 0
    reply = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    case = load_case_dir(Path(reply["path"]))
    assert case.directory == workspace / "cases" / "gate"
    assert case.manifest.model.class_name == "Gate"
    x, y = case.input_set("main").args
    assert isinstance(x, TensorSpec) and x.shape == [512, 300] and y.shape == [512, 300]  # type: ignore[union-attr]
    small_x, _ = case.input_set("smoke").args
    assert small_x.shape[0] < 512  # type: ignore[union-attr]
    assert case.manifest.description.startswith("Made by `kopt new gate --from")
    out, _ = smoke_forward(case)
    assert out.shape == tuple(small_x.shape)  # type: ignore[union-attr]
    assert "kopt new gate" in case.manifest_file.read_text().splitlines()[0]


def test_new_from_a_file_with_get_inputs_and_its_errors(
        tmp_path: Path, workspace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    file = write_problem(tmp_path, "kb", GROUPNORM)
    assert kopt(["new", "gn", "--from", str(file)]) == 0  # class defaults to Model
    assert "smoke set:" in capsys.readouterr().out
    assert load_case_dir(workspace / "cases" / "gn").input_set("smoke").init_kwargs["num_groups"] == 64
    assert kopt(["new", "gn", "--from", str(file)]) == 2
    err = capsys.readouterr().err
    assert "already holds a case" in err and "--name" not in err
    assert kopt(["new", "other"]) == 0 and kopt(["new", "other"]) == 2
    assert "--name" not in capsys.readouterr().err
    assert kopt(["new", "bad", "--from", f"{file}:Model", "--inputs", "8xq"]) == 2
    assert "--inputs item '8xq'" in capsys.readouterr().err
    assert kopt(["new", "nocls", "--from", f"{file}:Missing"]) == 2
    assert "defines no nn.Module class 'Missing'" in capsys.readouterr().err
    no_inputs = write_problem(tmp_path, "noinputs", "import torch.nn as nn\nclass M(nn.Module):\n"
                              "    def forward(self, x):\n        return x\n")
    assert kopt(["new", "ni", "--from", f"{no_inputs}:M"]) == 2
    assert "--inputs SHAPES" in capsys.readouterr().err


def test_a_classifier_fixed_to_its_image_size_keeps_it_and_shrinks_the_batch(
        tmp_path: Path, workspace: Path) -> None:
    """A linear layer over `8 * 224 * 224` features fixes the image size, so every sizing that
    shrinks it fails; the file's sizes with a batch of 2 run, over budget (KernelBench level-3
    VGG19 got no smoke set at all)."""
    file = write_problem(tmp_path, "classifier", """\
        import torch
        import torch.nn as nn

        class Model(nn.Module):
            def __init__(self, num_classes):
                super().__init__()
                self.conv = nn.Conv2d(3, 8, 3, padding=1)
                self.fc = nn.Linear(8 * 224 * 224, num_classes)

            def forward(self, x):
                return self.fc(torch.relu(self.conv(x)).flatten(1))

        batch_size = 16

        def get_inputs():
            return [torch.rand(batch_size, 3, 224, 224)]

        def get_init_inputs():
            return [10]
    """)
    case, report = import_in_process(file, workspace)
    assert case.manifest.smoke is not None, report
    (x,) = case.input_set("smoke").args
    assert isinstance(x, TensorSpec) and list(x.shape) == [2, 3, 224, 224], x.shape
    assert "batch alone" in case.manifest.description
    out, _largest = smoke_forward(case)
    assert torch.isfinite(out).all()


PERIOD = """\
    import math
    import torch
    import torch.nn as nn

    class Model(nn.Module):
        def __init__(self, freq_dim, dim, max_period=10000):
            super().__init__()
            self.freq_dim, self.max_period = freq_dim, max_period
            self.fc = nn.Linear(freq_dim, dim)

        def forward(self, t):
            half = self.freq_dim // 2
            f = torch.exp(-math.log(self.max_period) * torch.arange(half) / half)
            a = t[:, None] * f[None]
            return self.fc(torch.cat([torch.cos(a), torch.sin(a)], dim=-1))

    def get_inputs():
        return [torch.rand(4096) * 1000]

    def get_init_inputs():
        return [256, 1024]
"""


def test_a_constructor_value_that_sizes_nothing_keeps_its_value(tmp_path: Path, workspace: Path) -> None:
    """`max_period=10000` is an int argument like the sizes beside it, but no input or weight
    dim is, divides or is divided by it: shrunk to 80 with the sizes (a user-written model,
    2026-12-03), the smoke model computed another function and the candidate's fitted
    frequencies could not follow it. It is kept, and the sizes still shrink."""
    case, report = import_in_process(write_problem(tmp_path, "period", PERIOD), workspace)
    smoke = case.input_set("smoke")
    assert smoke.init_kwargs["max_period"] == 10000, smoke.init_kwargs
    assert smoke.init_kwargs["freq_dim"] < 256 and smoke.init_kwargs["dim"] < 1024
    assert "constructor values [10000] kept in smoke" in case.manifest.description


LAZY = """\
    import torch
    import torch.nn as nn

    class Model(nn.Module):
        def __init__(self, out_features=256):
            super().__init__()
            self.fc = nn.LazyLinear(out_features)

        def forward(self, x):
            return torch.relu(self.fc(x))

    def get_inputs():
        return [torch.randn(64, 128)]

    def get_init_inputs():
        return [256]
"""


def test_a_lazy_module_imports_though_its_weights_have_no_shape_yet(tmp_path: Path) -> None:
    """The probe reads the built model's weight shapes to tell sizes from other values; a lazy
    layer's parameters have none before the first forward. The probe still succeeds and
    leaves every argument a size (no value is pinned)."""
    result = probe(write_problem(tmp_path, "lazy", LAZY))
    assert result["ok"], result
    assert "state_shapes" not in result
