"""The offline engineer's online (single-pass) max/sum for rows longer than one block:
cross-entropy's looped kernel reads each logit once, softmax / log_softmax / logsumexp take
the online path on any reduced dim and still match PyTorch, -inf rows and lanes give no stray
NaN, and forms that are not safe (a negative scale) keep the per-level loops.

The looped path is forced on small shapes by shrinking the kernels' BLOCK_SIZE to 16 (the
launcher clips KOPT_CONFIG; ONE_PASS is false for any row longer than the block).
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest
import torch

from kopt.harness.case import load_case, load_case_dir
from kopt.harness.data import build_model
from kopt.phases.engineers.offline import generate_candidate
from tests.test_offline import _check_case, _load_candidate

ONLINE = "online (single-pass) max/sum"


def _looped(source: str, kernel: str) -> str:
    """The long-row branch of one generated reduction kernel."""
    body = source.split(f"def {kernel}(")[1].split("\n\n\n")[0]
    return body.split("else:  # a long row")[1]


def _force_loops(module, block: int = 16) -> None:
    for cfg in module.KOPT_CONFIG.values():
        if "BLOCK_SIZE" in cfg:
            cfg["BLOCK_SIZE"] = block


def _case(tmp: Path, name: str, body: str, shapes: list[list[int]], dtype: str = "float32"):
    d = tmp / name
    d.mkdir()
    (d / "model.py").write_text("import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n\n"
                                "class Model(nn.Module):\n    def forward(self, x):\n"
                                + textwrap.indent(textwrap.dedent(body).strip(), " " * 8) + "\n")
    args = "\n".join(f"    - {{shape: {s}, dtype: {dtype}}}" for s in shapes)
    (d / "manifest.yaml").write_text(f"name: {name}\ninputs:\n  args:\n{args}\ndevice: cpu\n")
    return load_case_dir(d)


def test_cross_entropy_reads_each_logit_once(workspace: Path) -> None:
    case = load_case("cross_entropy")
    result = generate_candidate(case)
    row_kernel = result.kernels[0]["name"]
    looped = _looped(result.source, row_kernel)
    assert ONLINE in looped
    assert looped.count("for start in range(") == 1, looped  # no full-size output: no second pass
    loop, after = looped.split("for start in range(")[1].split("\n        r", 1)
    assert loop.count("tl.load(x0_ptr") == 1, loop  # the logits: one load, in one loop
    assert "cr == " not in loop, loop  # the target's logit is not searched for element by element...
    assert after.count("tl.load(x0_ptr") == 1, after  # ...but loaded once, after the loop
    module = _load_candidate(result.source, workspace, "ce_looped")
    _force_loops(module)
    _check_case(case, module, "smoke")  # 64 x 256: 16 blocks per row, then the mean kernel
    _force_loops(module, 4096)
    _check_case(case, module, "shape0")  # 37 x 50257: 13 blocks, the last one ragged


@pytest.mark.parametrize("dim", [-1, 1, 0])
@pytest.mark.parametrize("op", ["softmax", "log_softmax", "logsumexp"])
def test_softmax_family_on_long_rows_any_dim(op: str, dim: int, workspace: Path) -> None:
    call = f"torch.logsumexp(x, dim={dim}, keepdim=False)" if op == "logsumexp" else f"torch.{op}(x, dim={dim})"
    case = _case(workspace, f"{op}_{dim % 3}", f"return {call} * 2.0", [[19, 21, 38]])
    result = generate_candidate(case)
    (kernel,) = [k["name"] for k in result.kernels]
    looped = _looped(result.source, kernel)
    assert ONLINE in looped
    # the statistics in one loop; softmax and log_softmax write a full-size output in a second
    assert looped.count("for start in range(") == (1 if op == "logsumexp" else 2), looped
    module = _load_candidate(result.source, workspace, f"{op}_{dim % 3}")
    _force_loops(module)
    _check_case(case, module, "main")


def _run_both(case, module, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    ref = build_model(case, "main")
    new = build_model(case, "main", cls=module.ModelNew)
    with torch.no_grad():
        return new(x), ref(x)


def _inf_rows() -> torch.Tensor:
    torch.manual_seed(0)
    x = torch.randn(6, 100) * 3.0
    inf = float("inf")
    x[0] = -inf  # a whole row of -inf
    x[1, :50] = -inf  # the first blocks of every lane -inf, then finite values
    x[2, 1::2] = -inf  # half the lanes never see a finite value
    x[3, 97] = 80.0  # the max arrives in the last, ragged block: every lane rescales
    x[4, 0] = 80.0  # the max in the first block
    x[5, 3] = -inf  # one -inf among finite values
    return x


def _row_op_case(workspace: Path, name: str, op: str):
    """A softmax-family op over rows of 100, and its candidate forced onto the looped path."""
    call = "torch.logsumexp(x, dim=-1, keepdim=True)" if op == "logsumexp" else f"torch.{op}(x, dim=-1)"
    case = _case(workspace, name, f"return {call}", [[6, 100]])
    module = _load_candidate(generate_candidate(case).source, workspace, name)
    _force_loops(module)
    return case, module


@pytest.mark.parametrize("op", ["softmax", "log_softmax", "logsumexp"])
def test_minus_inf_rows_and_lanes_match_pytorch(op: str, workspace: Path) -> None:
    case, module = _row_op_case(workspace, f"inf_{op}", op)
    got, want = _run_both(case, module, _inf_rows())
    # PyTorch: softmax/log_softmax of an all -inf row are NaN, its logsumexp is -inf
    torch.testing.assert_close(got, want, equal_nan=True, atol=1e-5, rtol=1e-5)
    assert torch.equal(got.isnan(), want.isnan())


@pytest.mark.parametrize("op", ["softmax", "log_softmax", "logsumexp"])
def test_nan_and_plus_inf_propagate_like_pytorch(op: str, workspace: Path) -> None:
    # a NaN or +inf element poisons its row as in PyTorch; logsumexp of a row with +inf is +inf
    case, module = _row_op_case(workspace, f"nan_{op}", op)
    torch.manual_seed(1)
    x = torch.randn(6, 100)
    x[0, 3] = float("nan")  # first block
    x[1, 99] = float("nan")  # last, ragged block
    x[2, 40] = float("inf")  # the new max is +inf: inf - inf is NaN in PyTorch
    x[3, 0] = float("inf")
    x[4, 50] = float("-inf")
    got, want = _run_both(case, module, x)
    assert torch.equal(got.isnan(), want.isnan()), (got, want)
    torch.testing.assert_close(got, want, equal_nan=True, atol=1e-5, rtol=1e-5)


def test_cross_entropy_with_minus_inf_logits(workspace: Path) -> None:
    case = load_case("cross_entropy")
    module = _load_candidate(generate_candidate(case, input_set="smoke").source, workspace, "ce_inf")
    _force_loops(module)
    ref = build_model(case, "smoke")
    new = build_model(case, "smoke", cls=module.ModelNew)
    logits = _inf_rows()
    logits[0, 7] = 0.0  # cross-entropy of an all -inf row is NaN in both; keep the mean finite
    targets = torch.tensor([7, 70, 4, 97, 3, -100])
    with torch.no_grad():
        torch.testing.assert_close(new(logits, targets), ref(logits, targets), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("form, online", [
    ("torch.exp((x - m) * 0.5)", True),
    ("torch.exp2(x - m)", True),
    ("torch.exp((x - m) / 3.0)", True),
    ("torch.exp(0.25 * (x - m))", True),
    ("torch.exp((x - m) * -1.0)", False),  # a negative scale: the largest term is not 1
    ("torch.exp(x - m.mean())", False),  # the shift is not the max: no max to keep stable
])
def test_scaled_exponential_forms(form: str, online: bool, workspace: Path) -> None:
    body = f"""
        m = x.amax(dim=-1, keepdim=True)
        s = {form}.sum(dim=-1, keepdim=True)
        return torch.log(s) + m
    """
    name = f"form{abs(hash(form)) % 10**6}"
    case = _case(workspace, name, body, [[9, 83]])
    result = generate_candidate(case)
    sources = [_looped(result.source, k["name"]) for k in result.kernels if k["kind"] == "reduction"]
    assert any(ONLINE in s for s in sources) == online
    module = _load_candidate(result.source, workspace, name)
    _force_loops(module)
    _check_case(case, module, "main")


def test_bf16_softmax_with_other_row_statistics(workspace: Path) -> None:
    # a plain sum of x joins the online loop; the normalised output needs the second pass
    body = """
        xf = x.float()
        p = torch.softmax(xf, dim=-1)
        return (p * xf.mean(dim=-1, keepdim=True)).to(x.dtype)
    """
    case = _case(workspace, "bf16_soft", body, [[21, 130]], dtype="bfloat16")
    result = generate_candidate(case)
    (kernel,) = [k["name"] for k in result.kernels]
    looped = _looped(result.source, kernel)
    assert ONLINE in looped and looped.count("for start in range(") == 2, looped
    module = _load_candidate(result.source, workspace, "bf16_soft")
    _force_loops(module)
    _check_case(case, module, "main")


@pytest.mark.parametrize("body", [
    # nll of log_softmax with ignored targets (targets draw from [-1, 40): -1 is ignored)
    "return F.cross_entropy(x, t, ignore_index=-1, reduction='none')",
    "return F.nll_loss(F.log_softmax(x * 0.5, dim=-1), t.clamp(min=0))",
    # the selected column of a softmax (an exp of the input, picked by one load)
    "return torch.softmax(x, dim=-1).gather(1, t.clamp(min=0)[:, None])",
    # column-major logits: the selected column's load uses the row's own strides
    "return F.cross_entropy(x.t().contiguous().t(), t.clamp(min=0))",
    # the reduced dim is not the last one: classes along dim 0
    "return torch.log_softmax(x.t(), dim=0).gather(0, t.clamp(min=0)[None, :])",
])
def test_selected_column_is_one_load_after_the_loop(body: str, workspace: Path) -> None:
    d = workspace / f"pick{abs(hash(body)) % 10**6}"
    d.mkdir()
    (d / "model.py").write_text("import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n\n"
                                "class Model(nn.Module):\n    def forward(self, x, t):\n        " + body + "\n")
    (d / "manifest.yaml").write_text(
        f"name: {d.name}\ninputs:\n  args:\n    - {{shape: [9, 40], dtype: float32, init: normal, std: 3.0}}\n"
        "    - {shape: [9], dtype: int64, init: randint, low: -1, high: 40}\ndevice: cpu\n")
    case = load_case_dir(d)
    result = generate_candidate(case)
    module = _load_candidate(result.source, workspace, d.name)
    _force_loops(module)
    for seed in (1, 2, 3):
        _check_case(case, module, "main", seed)
    looped = "".join(_looped(result.source, k["name"]) for k in result.kernels if k["kind"] == "reduction")
    assert "cr == " not in looped, looped  # no per-element search for the selected column
    assert re.search(r"tl\.load\(x0_ptr [^\n]*ci\d+", looped), looped  # one load at it
