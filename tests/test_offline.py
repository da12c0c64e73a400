"""The offline engineer: every bundled case and KernelBench problem gets a candidate whose
outputs match the model; random pointwise and reduction graphs (hypothesis) match PyTorch.

All runs are on the CPU through the Triton interpreter, on small inputs.
"""

from __future__ import annotations

import hashlib
import importlib.util
import math
import re
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from kopt.harness.case import load_case, load_case_dir
from kopt.harness.compare import compare_outputs
from kopt.harness.data import agent_provide_inputs, build_model
from kopt.harness.tolerance import tolerance_for
from kopt.phases.engineers.offline import generate_candidate

ROOT = Path(__file__).resolve().parent.parent
KERNELBENCH = sorted((ROOT / "tests" / "kernelbench").glob("*.py"))
BUNDLED = sorted(p.name for p in (ROOT / "cases").iterdir() if (p / "manifest.yaml").is_file())


def _load_candidate(source: str, tmp: Path, name: str):
    path = tmp / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(f"cand_{name}_{abs(hash(source))}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _check_case(case, module, input_set: str, seed: int = 1) -> None:
    ref = build_model(case, input_set)
    new = build_model(case, input_set, cls=module.ModelNew)
    inputs = agent_provide_inputs(case, input_set, seed)
    with torch.no_grad():
        want = ref(*inputs.args, **inputs.kwargs)
        got = new(*inputs.args, **inputs.kwargs)
    want = want if isinstance(want, (tuple, list)) else [want]
    got = got if isinstance(got, (tuple, list)) else [got]
    assert len(want) == len(got)
    for w, g in zip(want, got, strict=False):
        assert g.shape == w.shape and g.dtype == w.dtype, f"{input_set}: {g.shape}/{g.dtype} vs {w.shape}/{w.dtype}"
        cmp = compare_outputs([g], [w], tolerance_for(case, w.dtype))
        assert cmp.ok, f"{case.name} {input_set}: {cmp.to_text()}"


def _small_sets(case) -> list[str]:
    """smoke, plus the shapes entries small enough for the interpreter."""
    sets = ["smoke"] if case.manifest.smoke is not None else []
    for i in range(len(case.manifest.shapes)):
        numel = sum(torch.Size(s.shape).numel() for s in case.input_set(f"shape{i}").tensor_specs())
        if numel <= 200_000:
            sets.append(f"shape{i}")
    return sets


@pytest.mark.parametrize("name", BUNDLED)
def test_bundled_case_candidate_matches_model(name: str, workspace: Path) -> None:
    case = load_case(name)
    result = generate_candidate(case)
    assert "@triton.jit" in result.source and "class ModelNew(nn.Module)" in result.source
    assert "import kopt" not in result.source and "from harness" not in result.source
    assert result.kernels, "no kernel generated"
    module = _load_candidate(result.source, workspace, name)
    # the launchers read KOPT_CONFIG; every kernel declares tunables
    assert set(module.KOPT_CONFIG) == set(module.KOPT_TUNABLES) == {k["name"] for k in result.kernels}
    for input_set in _small_sets(case):
        _check_case(case, module, input_set)


def test_generation_is_deterministic(workspace: Path) -> None:
    case = load_case("layernorm_gelu")
    assert generate_candidate(case).source == generate_candidate(case).source


def test_unfused_ops_are_reported(workspace: Path) -> None:
    result = generate_candidate(load_case("conv2d_relu_bias"))
    assert [u["op"] for u in result.unfused] == ["aten.convolution.default"]
    assert "cuDNN" in result.unfused[0]["reason"]
    kinds = {k["kind"] for k in result.kernels}
    assert kinds == {"pointwise"}  # the relu + bias epilogue


def test_layernorm_is_one_kernel(workspace: Path) -> None:
    result = generate_candidate(load_case("layernorm_gelu"))
    assert [k["kind"] for k in result.kernels] == ["reduction"]
    assert "gelu" in result.kernels[0]["fuses"]


@pytest.mark.parametrize("file", KERNELBENCH, ids=[f.stem for f in KERNELBENCH])
def test_kernelbench_problem_gets_matching_candidate(file: Path, workspace: Path) -> None:
    from kopt.harness.kernelbench import import_kernelbench

    case_dir = import_kernelbench(file, out=workspace / "kb" / file.stem)
    case = load_case_dir(case_dir)
    # generated on the set it is checked on, as a CPU run does: a smoke set may resize the
    # model's constructor arguments (a bias_shape follows the shrunk channels)
    input_set = "smoke" if case.manifest.smoke is not None else "main"
    result = generate_candidate(case, input_set=input_set)
    module = _load_candidate(result.source, workspace, case.name)
    _check_case(case, module, input_set)


def test_verifier_accepts_offline_candidate(workspace: Path) -> None:
    from kopt.harness.verify import verify_candidate

    case = load_case("rmsnorm")
    path = workspace / "rmsnorm.py"
    path.write_text(generate_candidate(case).source)
    report = verify_candidate(case, path, device="cpu", draws=1)
    assert report.accepted, report.to_text()


def test_engineer_writes_candidate_and_backs_off(workspace: Path) -> None:
    from kopt.phases.engineers.base import EngineerRequest, Toolbox, make_engineer

    engineer = make_engineer("offline")
    events = []
    box = Toolbox(verify=lambda p: None, profile=lambda p: {})
    req = EngineerRequest(case=load_case("gated_mlp"), worktree=workspace, plan={}, iteration=1, toolbox=box)
    first = engineer.propose(req, events.append)
    assert first.candidate == "kernels/gated_mlp.py"
    text1 = (workspace / first.candidate).read_text()
    assert first.tunables and any(e.kind == "log" for e in events)
    req2 = EngineerRequest(case=req.case, worktree=workspace, plan={}, iteration=2, toolbox=box,
                           feedback="correct: FAILED max abs err 3.2 at (0, 1)")
    second = engineer.propose(req2, events.append)
    text2 = (workspace / second.candidate).read_text()
    assert text1 != text2  # a more conservative candidate: the epilogue leaves the matmul
    assert "no matmul epilogue" in second.notes


# -- property tests: random pointwise and reduction graphs ---------------------------------

UNARY = ["torch.exp(-x.abs())", "torch.tanh(x)", "torch.sigmoid(x)", "F.gelu(x)",
         "F.gelu(x, approximate='tanh')", "F.silu(x)", "torch.relu(x)", "F.leaky_relu(x, 0.1)",
         "torch.clamp(x, -0.5, 0.7)", "torch.erf(x)", "torch.rsqrt(x.abs() + 1.0)",
         "x.pow(2)", "torch.where(x > 0.1, x, -x * 0.5)", "(x * 2.5 - 1.0)",
         "torch.log(x.abs() + 1e-3)", "x.float().to(x.dtype)", "torch.abs(x)"]
BINARY = ["x + y", "x * y", "x - y", "torch.maximum(x, y)", "torch.where(y > 0, x, y)", "x / (y.abs() + 1.0)"]
REDUCE = ["x.sum(dim={d}, keepdim=True)", "x.mean(dim={d}, keepdim=True)",
          "x.amax(dim={d}, keepdim=True)", "x.var(dim={d}, keepdim=True)",
          "torch.softmax(x, dim={d})", "torch.log_softmax(x, dim={d})",
          "torch.logsumexp(x, dim={d}, keepdim=True)", "x.amin(dim={d}, keepdim=True)"]


def _write_case(tmp: Path, body: list[str], shapes: list[list[int]], dtype: str) -> Path:
    # the name seeds the inputs (harness.data), so it must not change between runs: str hash()
    # is salted per process, which made a failing bf16 example pass on a re-run
    d = tmp / f"prop{hashlib.sha1(repr((body, shapes, dtype)).encode()).hexdigest()[:8]}"
    d.mkdir(parents=True, exist_ok=True)
    src = "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n\n" \
          "class Model(nn.Module):\n    def forward(self, x, y):\n" + \
          textwrap.indent("\n".join(body), " " * 8) + "\n"
    (d / "model.py").write_text(src)
    args = "\n".join(f"    - {{shape: {s}, dtype: {dtype}}}" for s in shapes)
    # bf16 reductions compare with eager, which rounds every intermediate of the `pre` ops to
    # bf16 while the fused kernel keeps float32; steps like `x * 2.5 - 1.0` amplify that to a
    # few bf16 ulps (seen in CI: 3.703 vs 3.656 at one of 231 elements). bf16/fp16 pointwise
    # chains do not use this: they compare with a float64 evaluation (_check_low_precision).
    tol = "tolerance: {atol: 3.0e-2, rtol: 3.0e-2, rel: 1.0e-2}\n" if dtype == "bfloat16" else ""
    (d / "manifest.yaml").write_text(f"name: {d.name}\ninputs:\n  args:\n{args}\ndevice: cpu\n{tol}")
    return d


@st.composite
def pointwise_graphs(draw):
    rank = draw(st.integers(1, 3))
    shape = draw(st.lists(st.sampled_from([1, 3, 7, 16, 33]), min_size=rank, max_size=rank))
    shape[-1] = max(shape[-1], 3)
    # y broadcasts against x: some dims set to 1, maybe fewer dims
    yshape = [1 if draw(st.booleans()) else s for s in shape][draw(st.integers(0, rank - 1)):]
    ops = draw(st.lists(st.tuples(st.sampled_from(UNARY + BINARY), st.booleans()), min_size=1, max_size=6))
    body = []
    for expr, swap in ops:
        if swap and expr in BINARY:  # swap the operands as whole names (not `torch.mayimum`)
            expr = re.sub(r"\b[xy]\b", lambda m: "y" if m[0] == "x" else "x", expr)
        body.append(f"x = {expr}")
    body.append("return x")
    dtype = draw(st.sampled_from(["float32", "bfloat16", "float16"]))
    return body, [shape, yshape or [1]], dtype


@st.composite
def reduction_graphs(draw):
    rank = draw(st.integers(1, 3))
    shape = draw(st.lists(st.sampled_from([2, 5, 16, 33, 70]), min_size=rank, max_size=rank))
    d = draw(st.integers(-rank, rank - 1))
    pre = draw(st.lists(st.sampled_from(UNARY[:8]), max_size=2))
    red = draw(st.sampled_from(REDUCE)).format(d=d)
    post = draw(st.sampled_from(["x", "x * y", "x + 1.0", "torch.sigmoid(x)"]))
    body = [f"x = {p}" for p in pre] + [f"x = {red}", f"x = {post}", "return x"]
    dtype = draw(st.sampled_from(["float32", "bfloat16"]))
    return body, [shape, shape], dtype


def _check_property(tmp: Path, body: list[str], shapes: list[list[int]], dtype: str) -> None:
    case = load_case_dir(_write_case(tmp, body, shapes, dtype))
    result = generate_candidate(case)
    module = _load_candidate(result.source, tmp, case.name)
    _check_case(case, module, "main", seed=3)


# Where a bf16/fp16 candidate rounds besides its final store, as the float64 evaluation
# writes it (R rounds to the graph's dtype): after an explicit cast; after silu (its
# decomposition computes in float32 and casts back: see the `_to_copy` casts in a generated
# kernel); and at `y.abs() + 1.0`, which a y smaller than x gets a kernel of its own for,
# stored in the graph's dtype (seen: a [1] or [1, 16] y beside a [16, 16] x).
ROUNDINGS = {"x.float().to(x.dtype)": "R(x.float().to(x.dtype))", "F.silu(x)": "R(F.silu(x))",
             "x / (y.abs() + 1.0)": "x / R(y.abs() + 1.0)"}
# Absolute slack for the kernel's float32 arithmetic, times 1 + the largest |intermediate|:
# 64 float32 ulps, far under one bf16 (2**-7) or fp16 (2**-10) ulp at 1.0. It covers
# cancellation near zero (tanh as 2 sigmoid(2x) - 1 at x = 1e-5 is off by ~1e-7; erf's fit
# by <= 8.9e-8) where a bound in ulps of the result alone would be too tight.
F32_SLACK = 2.0**-18


def _float64_graph(body: list[str], args: list[torch.Tensor], round_at: int | None = None,
                   dtype: torch.dtype | None = None) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """The graph of `body` in float64 from the same (bf16/fp16) inputs, and every line's value;
    line `round_at` rounds to `dtype` where ROUNDINGS says the candidate may."""
    x, y = (a.double() for a in args)
    names = {"torch": torch, "F": F, "R": lambda t: t.to(dtype).double()}
    values = []
    for i, line in enumerate(body[:-1]):
        expr = line.removeprefix("x = ")
        expr = ROUNDINGS[expr] if i == round_at else expr
        x = eval(expr, names, {"x": x, "y": y})  # noqa: S307 (the test's own graph text)
        values.append(x)
    return x, values


def _ulp(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The spacing of `dtype`'s values around each (float64) element of `t`."""
    fi = torch.finfo(dtype)
    _, e = torch.frexp(t)  # t = m * 2**e with 0.5 <= |m| < 1: t's binade is 2**(e - 1)
    binade = torch.clamp(e - 1, min=int(math.log2(fi.tiny)))  # subnormals share the lowest
    return fi.eps * torch.exp2(binade.double())


def _check_low_precision(case, module, body: list[str], dtype: torch.dtype) -> None:
    """A bf16/fp16 pointwise chain against its float64 value from the same inputs.

    The fused kernel computes in float32 and rounds at the store (and at ROUNDINGS), so it is
    held to one ulp of the output dtype around the float64 value, plus what each of those
    roundings changes the float64 value by (`slack`, first order), plus F32_SLACK. Eager is not the reference: it rounds every intermediate, and a chain like
    relu -> sigmoid -> add -> x*2.5-1 -> silu drifts a few ulps from the true value (relative
    error 0.0132 against the kernel in one CI run), so comparing the kernel with eager under
    a loose bound was both flaky and blind to kernel errors under about 1%.
    """
    args = agent_provide_inputs(case, "main", 3).args
    with torch.no_grad():
        got = build_model(case, "main", cls=module.ModelNew)(*args)
        true, values = _float64_graph(body, args)
        # the replay above is the model's own graph: the model on float64 inputs agrees exactly
        assert torch.equal(true, build_model(case, "main")(*(a.double() for a in args)))
    assert got.dtype == dtype and got.shape == true.shape, f"{got.shape}/{got.dtype}"
    slack = torch.zeros_like(true)
    for i, line in enumerate(body[:-1]):
        if line.removeprefix("x = ") in ROUNDINGS:
            slack += (_float64_graph(body, args, i, dtype)[0] - true).abs()
    biggest = torch.stack([v.abs().expand_as(true) for v in values]).amax(0)
    # elements whose float64 intermediates a float32 kernel cannot hold are not judged
    judged = biggest <= torch.finfo(torch.float32).max
    want, g = true.to(dtype).double(), got.double()
    special = ~torch.isfinite(want) & judged
    assert torch.equal(g[special].nan_to_num(), want[special].nan_to_num()), \
        f"{case.name}: NaN/Inf where float64 rounded to {dtype} has {want[special].tolist()}"
    judged &= ~special
    bound = _ulp(true, dtype) + slack + F32_SLACK * (1.0 + biggest)
    err = (g - true).abs()
    bad = judged & ~(err <= bound)  # NaN errors are bad
    if bad.any():
        idx = bad.nonzero()[:5].tolist()
        shown = ", ".join(f"{i} got {g[tuple(i)]:.6g} want {true[tuple(i)]:.6g} (bound "
                          f"{bound[tuple(i)]:.3g})" for i in idx)
        raise AssertionError(f"{case.name}: {int(bad.sum())}/{bad.numel()} elements more than "
                             f"1 {dtype} ulp from float64: {shown}")


def _check_pointwise(tmp: Path, body: list[str], shapes: list[list[int]], dtype: str) -> None:
    if dtype == "float32":  # eager float32 is as accurate as the kernel: the harness's bound
        _check_property(tmp, body, shapes, dtype)
        return
    case = load_case_dir(_write_case(tmp, body, shapes, dtype))
    module = _load_candidate(generate_candidate(case).source, tmp, case.name)
    _check_low_precision(case, module, body, getattr(torch, dtype))


# derandomize: the same examples on every run and machine, so a red CI run reproduces
@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck),
          phases=[Phase.explicit, Phase.reuse, Phase.generate], derandomize=True)
@given(graph=pointwise_graphs())
def test_random_pointwise_graphs_match_pytorch(graph, tmp_path_factory) -> None:
    tmp = tmp_path_factory.mktemp("pw")
    _check_pointwise(tmp, *graph)


# the chain that failed in CI against eager (relative error 0.0132 vs a 0.01 bound)
CI_CHAIN = ["x = torch.relu(x)", "x = torch.sigmoid(x)", "x = x + y", "x = (x * 2.5 - 1.0)",
            "x = F.silu(x)", "return x"]


def test_pointwise_bf16_chain_within_one_ulp_and_a_wrong_sigmoid_fails(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _check_pointwise(tmp_path / "ok", CI_CHAIN, [[7, 33], [33]], "bfloat16")

    # sigmoid 0.4% too big (half a bf16 ulp at 1.0): eager under the harness's bf16 bound
    # (the old check) let this through; the float64 reference does not
    from kopt.phases.engineers.offline.kernels import writer as kernels

    emit = kernels.emit_pointwise

    def wrong_sigmoid(op, *a, **k):
        code = emit(op, *a, **k)
        return f"({code} * 1.00390625)" if op == "sigmoid" else code

    monkeypatch.setattr(kernels, "emit_pointwise", wrong_sigmoid)
    with pytest.raises(AssertionError, match="ulp from float64"):
        _check_pointwise(tmp_path / "wrong", CI_CHAIN, [[7, 33], [33]], "bfloat16")


@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck),
          phases=[Phase.explicit, Phase.reuse, Phase.generate], derandomize=True)
@given(graph=reduction_graphs())
def test_random_reduction_graphs_match_pytorch(graph, tmp_path_factory) -> None:
    tmp = tmp_path_factory.mktemp("red")
    _check_property(tmp, *graph)


def test_non_contiguous_and_odd_sizes(workspace: Path) -> None:
    d = workspace / "nc"
    d.mkdir()
    (d / "model.py").write_text(textwrap.dedent("""
        import torch
        import torch.nn as nn


        class Model(nn.Module):
            def __init__(self, hidden: int = 45):
                super().__init__()
                self.w = nn.Parameter(torch.randn(hidden))

            def forward(self, x, y):
                h = torch.softmax(x * self.w, dim=-1)
                return h + y.sum(dim=0)
    """))
    (d / "manifest.yaml").write_text(textwrap.dedent("""
        name: nc
        model: {init_kwargs: {hidden: 45}}
        inputs:
          args:
            - {shape: [23, 45], contiguous: false}
            - {shape: [7, 45]}
        device: cpu
        shapes:
          - args: [{shape: [5, 30]}, {shape: [3, 30]}]
            init_kwargs: {hidden: 30}
    """))
    case = load_case_dir(d)
    module = _load_candidate(generate_candidate(case).source, workspace, "nc")
    _check_case(case, module, "main")
    _check_case(case, module, "shape0")


def test_a_leading_size_export_fixes_is_named_in_the_notes(tmp_path: Path) -> None:
    """A Python loop over the leading size unrolls into a program that changes with it: the
    second trace does not compare, the size stays fixed and the candidate's notes say so
    first; a plain batch stays symbolic and needs no note."""
    from kopt.phases.engineers.offline import generate_candidate
    from kopt.phases.engineers.offline.engineer import FIXED_LEAD_NOTE

    fixed = load_case_dir(_write_case(
        tmp_path / "fixed", ["acc = x[0] * 0.0", "for t in range(x.shape[0]):",
                             "    acc = acc + torch.relu(x[t])", "return acc * 2.0"],
        [[6, 10], [1]], "float32"))
    notes = generate_candidate(fixed).notes
    assert notes and notes[0].startswith(f"{FIXED_LEAD_NOTE} 6"), notes
    plain = load_case_dir(_write_case(tmp_path / "plain", ["return torch.relu(x) * 2.0"],
                                      [[6, 10], [1]], "float32"))
    assert not any(n.startswith(FIXED_LEAD_NOTE) or "second trace" in n
                   for n in generate_candidate(plain).notes)


WINDOWS = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x, y):
        B, H, W, C = x.shape
        w = x.view(B, H // 2, 2, W // 2, 2, C).permute(0, 1, 3, 2, 4, 5).reshape(-1, 4, C)
        w = torch.softmax(w, dim=-1) * y
        b = int(w.shape[0] * C / C / (H * W / 4))  # as Swin's window_reverse: export fixes it
        return w.view(b, H // 2, W // 2, 2, 2, C).permute(0, 1, 3, 2, 4, 5).reshape(b, H, W, C) + 1.0
"""


def _case_dir(d: Path, model: str, manifest: str) -> Path:
    """A case folder at `d` with `model` as model.py and `manifest` (dedented) as its manifest."""
    d.mkdir()
    (d / "model.py").write_text(model)
    (d / "manifest.yaml").write_text(textwrap.dedent(manifest))
    return d


def test_a_leading_size_export_fixes_follows_the_input_again(tmp_path: Path) -> None:
    """A batch read back through int() of a float (KernelBench level-3 30's window reverse):
    export fixes it and every size after it (views of 6 and 36 windows); a second trace one row
    larger is the same program up to those sizes, so they become expressions of the input's
    leading size, and the candidate matches the model at batches it was not traced at."""
    from kopt.phases.engineers.offline import generate_candidate
    from kopt.phases.engineers.offline.engineer import FIXED_LEAD_NOTE

    case = load_case_dir(_case_dir(tmp_path / "windows", WINDOWS, """
        name: windows
        inputs:
          args: [{shape: [6, 4, 6, 5]}, {shape: [1]}]
        device: cpu
        shapes:
          - args: [{shape: [3, 4, 6, 5]}, {shape: [1]}]
          - args: [{shape: [1, 4, 6, 5]}, {shape: [1]}]
    """))
    result = generate_candidate(case)
    assert not any(n.startswith(FIXED_LEAD_NOTE) for n in result.notes), result.notes
    assert "second trace" in result.notes[0], result.notes
    assert "kopt_lead = x.shape[0]" in result.source
    module = _load_candidate(result.source, tmp_path, "windows")
    for name in ("main", "shape0", "shape1"):
        _check_case(case, module, name)


LOOP_OVER_ROWS = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.cell = nn.Linear(8, 4)

    def forward(self, x, h):
        outs = []
        for t in range(x.size(0)):  # a hand-written RNN over its sequence (the leading size)
            h = torch.tanh(self.cell(torch.cat((x[t], h), dim=1)))
            outs.append(h)
        return torch.stack(outs, dim=0)
"""


def test_a_python_loop_over_the_leading_size_is_said_and_traced_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Export unrolls the loop, one `x[t]` per step: a second trace one row larger is a
    longer program that cannot make the size symbolic again, so it is not made (it cost
    30-60 s of codegen for KernelBench level-3 34's 256 steps), and the note says why the
    candidate is fixed at the traced number of steps."""
    from kopt.phases.engineers.offline import capture, generate_candidate
    from kopt.phases.engineers.offline.engineer import FIXED_LEAD_NOTE

    d = _case_dir(tmp_path / "loop", LOOP_OVER_ROWS, """
        name: loop
        inputs:
          args: [{shape: [5, 2, 4]}, {shape: [2, 4]}]
        device: cpu
    """)
    exports: list[object] = []
    real = capture._export
    monkeypatch.setattr(capture, "_export", lambda *a, **k: exports.append(1) or real(*a, **k))
    result = generate_candidate(load_case_dir(d))
    assert len(exports) == 1
    assert result.notes[0].startswith(f"{FIXED_LEAD_NOTE} 5 (a Python loop over it"), result.notes
    module = _load_candidate(result.source, tmp_path, "loop")
    _check_case(load_case_dir(d), module, "main")  # right at the traced number of steps


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
