"""Recurrent layers kept whole through torch.export (`harness/recurrent_ops.py`)
and run by the candidate's `_recurrent` (`kernels/recurrent.py`: an input product, then a
Triton kernel a step), with the same aten op eager runs behind the region switch; outputs that
match eager's on the CPU interpreter, for every kind and layout of layer."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from kopt.harness.recurrent_ops import aten_target, whole_recurrent_layers
from kopt.phases.engineers.offline import generate_candidate
from tests.test_offline import _check_case, _load_candidate
from tests.test_offline_fusion import _constructor_case

LAYERS = {
    "lstm": ("nn.LSTM(6, hidden, 2, batch_first=True, bidirectional=True)", "aten.lstm.input"),
    "gru": ("nn.GRU(6, hidden, 3, batch_first=True)", "aten.gru.input"),
    "rnn": ("nn.RNN(6, hidden, 1, nonlinearity='relu')", "aten.rnn_relu.input"),
}


@pytest.mark.parametrize("kind", sorted(LAYERS))
def test_a_recurrent_layer_is_one_node_run_by_its_own_kernels(tmp_path: Path, kind: str) -> None:
    layer, op = LAYERS[kind]
    width = "hidden * 2" if "bidirectional" in layer else "hidden"
    case = _constructor_case(tmp_path, kind, "hidden",
                             [f"self.rnn = {layer}", f"self.fc = nn.Linear({width}, 5)"],
                             ["out, _ = self.rnn(x)", "return torch.relu(self.fc(out[:, -1, :]))"],
                             "hidden: 12", [3, 7, 6], "hidden: 12", [2, 5, 6])
    result = generate_candidate(case)
    assert not result.unfused, result.unfused  # one node: the layer, not its cells
    assert [k["fuses"] for k in result.kernels if k["kind"] == "recurrent"] == [[op.split(".")[1]]]
    # the Triton layer behind a switch, the library's (the same aten op) on the other side
    assert f'_recurrent("{op.split(".")[1]}", ' in result.source
    assert f'_rnn_library("{op.split(".")[1]}", ' in result.source and "kopt::" not in result.source
    # the export held the layer as one custom op (shapes from its fake), not its cells
    from kopt.phases.engineers.offline.capture import _EXPORTS

    exported = [str(n.target) for ep, *_ in _EXPORTS.values() for n in ep.graph.nodes]
    assert f"kopt.{op.split('.')[1]}.default" in exported, sorted(set(exported))[:20]
    module = _load_candidate(result.source, tmp_path, kind)
    _check_case(case, module, "main")
    _check_case(case, module, "smoke")
    module.KOPT_REGIONS["r0"] = "torch"
    _check_case(case, module, "main")


def test_the_library_side_is_a_graph_break_under_torch_compile(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    """The verifier calls the candidate under torch.compile. With the region on the library's
    side, a traced aten op decomposes into every step's cell (KernelBench level-3 38's
    verification compiled for minutes on an H200): the op must stay out of Dynamo's graphs, as
    nn.LSTM's own call does."""
    from kopt.harness.data import build_model
    from kopt.phases.engineers.offline.recurrent import RECURRENT_OPS

    case = _constructor_case(tmp_path, "grulib", "hidden",
                             ["self.rnn = nn.GRU(6, hidden, 2, batch_first=True)"],
                             ["return self.rnn(x)[0]"], "hidden: 8", [3, 7, 6], "hidden: 8",
                             [2, 5, 6])
    module = _load_candidate(generate_candidate(case).source, tmp_path, "grulib")
    monkeypatch.setitem(sys.modules, module.__name__, module)  # (Dynamo imports what it traces)
    # every region on PyTorch's side (Dynamo cannot trace the interpreter's launches)
    monkeypatch.setattr(module, "KOPT_REGIONS", dict.fromkeys(module.KOPT_REGIONS, "torch"))
    new = build_model(case, "smoke", cls=module.ModelNew)
    traced: list[str] = []

    def backend(gm, _inputs):  # noqa: ANN001, ANN202
        traced.extend(str(n.target) for n in gm.graph.nodes)
        return gm.forward

    torch._dynamo.reset()
    x = torch.randn(2, 5, 6)
    with torch.no_grad():
        want = new(x)
        got = torch.compile(new, backend=backend)(x)
    torch._dynamo.reset()
    torch.testing.assert_close(got, want)
    assert traced, "nothing was traced"
    assert not [t for t in traced if any(str(op) in t for op in RECURRENT_OPS) or "gru" in t], traced


def test_the_routing_gives_torch_results_packed_or_not_and_ends_with_the_export() -> None:
    torch.manual_seed(0)
    lstm, gru = torch.nn.LSTM(4, 6, 2, bidirectional=True), torch.nn.GRU(4, 6, batch_first=True)
    x = torch.randn(5, 3, 4)
    packed = torch.nn.utils.rnn.pack_padded_sequence(x, [5, 4, 2])
    with torch.no_grad():
        want = [lstm(x)[0], gru(x)[0], lstm(packed)[0].data]
        with whole_recurrent_layers():
            got = [lstm(x)[0], gru(x)[0], lstm(packed)[0].data]  # the last: torch's own path
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w)
    before = torch._VF.lstm
    with pytest.raises(RuntimeError), whole_recurrent_layers():
        assert torch._VF.lstm is not before
        raise RuntimeError("an export that fails")
    assert torch._VF.lstm is before or torch._VF.lstm == before
    assert "lstm" not in torch._VF.__dict__
    assert aten_target(torch.ops.aten.relu.default) is torch.ops.aten.relu.default


def _layer(kind: str, layers: int, bidirectional: bool, batch_first: bool, bias: bool,
           dtype: torch.dtype, inputs: int = 7, hidden: int = 20) -> torch.nn.Module:
    cls = {"lstm": torch.nn.LSTM, "gru": torch.nn.GRU}.get(kind, torch.nn.RNN)
    extra = {"nonlinearity": kind[4:]} if kind.startswith("rnn") else {}
    return cls(inputs, hidden, layers, bias=bias, batch_first=batch_first,
               bidirectional=bidirectional, **extra).to(dtype)


@pytest.fixture(scope="module")
def recurrent_module(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    """A generated candidate's module (for its `_recurrent`): an LSTM case's."""
    tmp = tmp_path_factory.mktemp("recurrent")
    case = _constructor_case(tmp, "lstm_only", "hidden", ["self.rnn = nn.LSTM(6, hidden, 1)"],
                             ["return self.rnn(x)[0]"], "hidden: 8", [3, 2, 6], "hidden: 8", [2, 2, 6])
    return _load_candidate(generate_candidate(case).source, tmp, "lstm_only")


@pytest.mark.parametrize("launch", [1, 2, 0], ids=["a launch a layer", "W_hh in registers",
                                                  "a launch a step"])
@pytest.mark.parametrize("kind", ["lstm", "gru", "rnn_tanh", "rnn_relu"])
@pytest.mark.parametrize(("layers", "bidirectional", "batch_first", "bias", "batch", "steps"), [
    (2, False, False, True, 3, 5), (2, True, True, True, 3, 5), (1, False, True, False, 17, 1),
    (3, True, False, False, 1, 4)])
def test_each_kind_of_layer_matches_the_aten_op(recurrent_module, monkeypatch, kind: str,  # noqa: ANN001
                                                layers: int, bidirectional: bool, batch_first: bool,
                                                bias: bool, batch: int, steps: int, launch: int) -> None:
    """Layers, directions, layouts, no bias, one step, a batch past one block of 16 rows, one
    sequence, with each of the three launches: outputs and final states as the aten op
    returns them (values, shapes, dtypes), and the initial states left as they were."""
    config = {**recurrent_module.KOPT_CONFIG["_rnn_step_kernel"], "LAYER": launch}
    monkeypatch.setitem(recurrent_module.KOPT_CONFIG, "_rnn_step_kernel", config)
    torch.manual_seed(layers * 7 + steps)
    net = _layer(kind, layers, bidirectional, batch_first, bias, torch.float32, hidden=21)
    dirs = 2 if bidirectional else 1
    x = torch.randn((batch, steps, 7) if batch_first else (steps, batch, 7))
    h0, c0 = torch.randn(layers * dirs, batch, 21), torch.randn(layers * dirs, batch, 21)
    hx = [h0, c0] if kind == "lstm" else h0
    saved = [h0.clone(), c0.clone()]
    args = (list(net._flat_weights), bias, layers, 0.0, False, bidirectional, batch_first)
    want = getattr(torch.ops.aten, kind).input(x, hx, *args)
    got = recurrent_module._recurrent(kind, x, hx, *args)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape and g.dtype == w.dtype
        torch.testing.assert_close(g, w, atol=2e-5, rtol=1e-4)
    assert torch.equal(h0, saved[0]) and torch.equal(c0, saved[1])


def test_half_precision_and_what_the_kernels_leave_to_the_library(recurrent_module) -> None:  # noqa: ANN001
    """bfloat16 sequences run in float32 state (within bfloat16's rounding of eager's); an LSTM
    with projections and dropout between layers in training run the aten op itself."""
    torch.manual_seed(3)
    net = _layer("gru", 2, False, True, True, torch.bfloat16)
    x, h0 = torch.randn(3, 6, 7, dtype=torch.bfloat16), torch.randn(2, 3, 20, dtype=torch.bfloat16)
    args = (list(net._flat_weights), True, 2, 0.0, False, False, True)
    want = torch.ops.aten.gru.input(x, h0, *args)
    got = recurrent_module._recurrent("gru", x, h0, *args)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == torch.bfloat16
        torch.testing.assert_close(g.float(), w.float(), atol=3e-2, rtol=3e-2)

    calls = []
    real = recurrent_module._RNN_ATEN["lstm"]
    recurrent_module._RNN_ATEN["lstm"] = lambda *a: calls.append(a) or real(*a)
    try:
        proj = torch.nn.LSTM(7, 20, 1, proj_size=5)
        x = torch.randn(4, 2, 7)
        hx = [torch.zeros(1, 2, 5), torch.zeros(1, 2, 20)]
        got = recurrent_module._recurrent("lstm", x, hx, list(proj._flat_weights), True, 1, 0.0,
                                          False, False, False)
        torch.testing.assert_close(got[0], proj(x, tuple(hx))[0])
        deep = _layer("lstm", 2, False, False, True, torch.float32)
        hx = [torch.zeros(2, 2, 20), torch.zeros(2, 2, 20)]
        recurrent_module._recurrent("lstm", x, hx, list(deep._flat_weights), True, 2, 0.5,
                                    True, False, False)
    finally:
        recurrent_module._RNN_ATEN["lstm"] = real
    assert len(calls) == 2  # each ran the library's layer


def test_the_forward_counts_every_step_as_a_launch(tmp_path: Path) -> None:
    """The CUDA graph pays for a forward of many launches: FORWARD_STEPS counts the input
    product and each step of each layer and direction at the traced sizes (2 layers x 2
    directions x (7 steps + 1) = 32, plus the forward's other steps)."""
    from kopt.phases.source_edit import literal

    case = _constructor_case(tmp_path, "gru2", "hidden",
                             ["self.rnn = nn.GRU(6, hidden, 2, batch_first=True, bidirectional=True)"],
                             ["return torch.relu(self.rnn(x)[0])"], "hidden: 8", [3, 7, 6], "hidden: 8",
                             [2, 5, 6])
    source = generate_candidate(case).source
    steps = literal(source, "FORWARD_STEPS")
    assert 32 < steps <= 40, steps  # (without the layer's launches: the few steps of the head)


def test_the_step_kernel_is_tuned_like_the_others(recurrent_module) -> None:  # noqa: ANN001
    """The step kernel declares its launch parameters (KOPT_TUNABLES / KOPT_CONFIG, which the
    accelerator searches on a GPU) and launches what KOPT_CONFIG says: a reduction chunk of 16
    over a 21-wide layer walks the recurrent product in two chunks, with the same results."""
    assert set(recurrent_module.KOPT_TUNABLES["_rnn_step_kernel"]) == {"LAYER", "BH", "BK", "num_warps",
                                                                      "num_stages"}
    torch.manual_seed(5)
    net = _layer("lstm", 2, True, False, True, torch.float32, hidden=21)
    x, h0, c0 = torch.randn(4, 3, 7), torch.randn(4, 3, 21), torch.randn(4, 3, 21)
    args = (list(net._flat_weights), True, 2, 0.0, False, True, False)
    want = torch.ops.aten.lstm.input(x, [h0, c0], *args)
    saved = dict(recurrent_module.KOPT_CONFIG["_rnn_step_kernel"])
    recurrent_module.KOPT_CONFIG["_rnn_step_kernel"].update({"BH": 32, "BK": 16, "num_warps": 4})
    try:
        assert recurrent_module._rnn_blocks(3, 21, 4, 2, x.device)[3] == 16
        got = recurrent_module._recurrent("lstm", x, [h0, c0], *args)
    finally:
        recurrent_module.KOPT_CONFIG["_rnn_step_kernel"] = saved
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, atol=2e-5, rtol=1e-4)


def test_the_default_holds_w_hh_in_registers_for_an_lstm_only(recurrent_module) -> None:  # noqa: ANN001
    """STEP_DEFAULT's LAYER "auto": an LSTM's layer runs the resident kernel (LAYER 2), a GRU's
    and an Elman RNN's the layer kernel (1) at the layer kernel's own launch (the resident GRU
    drifted past the verifier's bound on hard draws on an H200); a tuned LAYER is taken as it
    is."""
    config = recurrent_module.KOPT_CONFIG["_rnn_step_kernel"]
    assert config["LAYER"] == "auto"
    cpu = torch.device("cpu")
    assert [recurrent_module._rnn_blocks(10, 256, gates, 1, cpu)[0] for gates in (4, 3, 1)] == [2, 1, 1]
    saved = dict(config)
    try:
        config["LAYER"] = 2
        assert recurrent_module._rnn_blocks(10, 256, 3, 1, cpu)[0] == 2
    finally:
        recurrent_module.KOPT_CONFIG["_rnn_step_kernel"] = saved


_RESOURCES = r'''
import importlib.util, os, re, subprocess, sys, warnings
warnings.filterwarnings("ignore")
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

spec = importlib.util.spec_from_file_location("cand", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
cuobjdump = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
step = dict(module.KOPT_CONFIG["_rnn_step_kernel"])
for name, cx, opts in [
        ("_rnn_step_kernel", {"KIND": int(sys.argv[2]), "G": int(sys.argv[3]), "HAS_BIAS": True, "BB": 16,
                              "BH": step["BH"], "BK": step["BK"], "DOT": module.RECURRENT_DOT},
         {"num_warps": step["num_warps"], "num_stages": step["num_stages"]}),
        ("_rnn_layer_kernel", {"KIND": int(sys.argv[2]), "G": int(sys.argv[3]), "HAS_BIAS": True, "BB": 16,
                               "BH": step["BH"], "BK": step["BK"], "DOT": module.RECURRENT_DOT},
         {"num_warps": step["num_warps"], "num_stages": step["num_stages"]}),
        ("_rnn_resident_kernel", {"KIND": int(sys.argv[2]), "G": int(sys.argv[3]), "GP": 4, "HAS_BIAS": True,
                                  "BB": 16, "BU": step["BH"], "HP": 256, "DOT": module.RECURRENT_DOT},
         {"num_warps": step["num_warps"], "num_stages": step["num_stages"]}),
        ("_rnn_input_kernel", {"HAS_BIAS": True, "BM": 64, "BN": 64, "BK": 32, "DOT": module.RECURRENT_DOT},
         {"num_warps": 4})]:
    fn = getattr(module, name)
    sig = {p.name: ("*i32" if p.name == "bar_ptr" else "*fp32" if p.name.endswith("_ptr") else "i32")
           for p in fn.params if p.name not in cx}
    src = ASTSource(fn=fn, signature={**sig, **{k: "constexpr" for k in cx}},
                    constexprs={(fn.arg_names.index(k),): v for k, v in cx.items()})
    kernel = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=opts)
    path = os.path.join(sys.argv[4], name + ".cubin")
    with open(path, "wb") as f:
        f.write(kernel.asm["cubin"])
    out = subprocess.run([cuobjdump, "--dump-resource-usage", path], capture_output=True, text=True).stdout
    print(name, re.search(r"REG:(\d+)", out).group(1), re.search(r"STACK:(\d+)", out).group(1))
'''


@pytest.mark.parametrize(("kind", "gates"), [(0, 4), (1, 3)])
def test_the_default_launch_compiles_for_sm90(recurrent_module, tmp_path: Path,  # noqa: ANN001
                                             kind: int, gates: int) -> None:
    """The recurrent kernels compile for sm_90 (the layer kernels' barrier: atomics at GPU scope
    and a spin loop; the resident one's gate split) at the default launch (16 units of each gate
    a program, 8 warps), in a process without the interpreter. The step is latency-bound and a
    spill to local memory is on every step's path: the first default (BK 128, 2 warps, 3
    stages) spilled 1296 bytes a thread and ran 1.7x slower on an H200; the resident kernel,
    the default, spills 8 bytes at most, the layer and step kernels at its launch 296 (triton
    3.9's build, 2026-12-01); the input product spills nothing."""
    import os
    import subprocess
    import sys

    import triton

    tool = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    if not tool.is_file():
        pytest.skip(f"no cuobjdump in this triton build ({tool})")
    script = tmp_path / "resources.py"
    script.write_text(_RESOURCES)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, str(script), recurrent_module.__file__, str(kind), str(gates),
                           str(tmp_path)], capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    usage = {name: (int(regs), int(stack)) for name, regs, stack in
             (line.split() for line in done.stdout.splitlines())}
    assert set(usage) == {"_rnn_step_kernel", "_rnn_layer_kernel", "_rnn_resident_kernel",
                          "_rnn_input_kernel"}, done.stdout
    assert usage["_rnn_input_kernel"][1] == 0, usage
    assert usage["_rnn_layer_kernel"][1] <= 720 and usage["_rnn_step_kernel"][1] <= 720, usage
    assert usage["_rnn_resident_kernel"][1] <= 64, usage


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_on_a_gpu_the_layer_kernels_barrier_holds(recurrent_module, monkeypatch, kind: str) -> None:  # noqa: ANN001
    """On a GPU the layer kernels run many programs a direction (hidden 256 at BH 32: 8; with
    W_hh in registers at 8 units: 32; both directions at once), which meet at the barrier
    between steps: a program that read h_{t-1} before the others wrote it would drift from
    cuDNN's layer within a few steps. The three launches against the aten op with cuDNN's
    TF32 off."""
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    torch.manual_seed(3)
    net = _layer(kind, 2, True, False, True, torch.float32, inputs=64, hidden=256).cuda()
    x = torch.randn(40, 10, 64, device="cuda")
    h0, c0 = torch.randn(4, 10, 256, device="cuda"), torch.randn(4, 10, 256, device="cuda")
    hx = [h0, c0] if kind == "lstm" else h0
    args = (list(net._flat_weights), True, 2, 0.0, False, True, False)
    with torch.no_grad():
        want = getattr(torch.ops.aten, kind).input(x, hx, *args)
        for launch, units in ((1, 32), (2, 8), (0, 32)):
            config = {**recurrent_module.KOPT_CONFIG["_rnn_step_kernel"], "LAYER": launch, "BH": units}
            monkeypatch.setitem(recurrent_module.KOPT_CONFIG, "_rnn_step_kernel", config)
            gates = 4 if kind == "lstm" else 3
            assert recurrent_module._rnn_blocks(10, 256, gates, 2, x.device)[0] == launch
            got = recurrent_module._recurrent(kind, x, hx, *args)
            for g, w in zip(got, want, strict=True):
                torch.testing.assert_close(g, w, atol=1e-4, rtol=1e-4)
