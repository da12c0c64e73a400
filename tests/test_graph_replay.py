"""A generated forward replayed as one CUDA graph (`phases/engineers/offline/graph_replay.py`)
and the verifier's view of a replay (`guards.LaunchCounter`'s graph hooks).

On the CPU: the candidate's graph key follows everything a captured graph depends on, the
cost rule keeps large memory-bound forwards op by op, and the guard counts a graph's captured
ops again at each replay. On a GPU (marked `gpu`): the replayed forward is the op-by-op
forward after new weights and new input values, and the verifier accepts it.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from kopt.harness.case import load_case
from kopt.harness.data import agent_provide_inputs, build_model
from kopt.harness.jobs.bench import graph_report
from kopt.harness.verification import guards
from kopt.phases.engineers.offline import generate_candidate


def _candidate(case_name: str, tmp_path: Path):  # type: ignore[no-untyped-def]
    case = load_case(case_name)
    file = tmp_path / f"{case_name}_candidate.py"
    file.write_text(generate_candidate(case).source)
    spec = importlib.util.spec_from_file_location(f"graph_{case_name}", file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return case, file, module


def _key(mod, model, x: torch.Tensor):  # type: ignore[no-untyped-def]
    return mod._graph_key(model, mod._input_form((x,)))


def test_graph_key_follows_weights_shapes_and_regions_not_values(tmp_path: Path) -> None:
    case, _, mod = _candidate("conv2d_relu_bias", tmp_path)
    model = build_model(case, "smoke", cls=mod.ModelNew)
    x = agent_provide_inputs(case, "smoke").args[0]
    key = _key(mod, model, x)
    x.copy_(torch.randn_like(x))
    assert _key(mod, model, x) == key, "new values in the same input: the same graph"
    assert _key(mod, model, x.clone()) == key, "inputs are copied in: storage is free"
    assert _key(mod, model, x[:1].clone()) != key, "another leading size"
    model.load_state_dict({k: v + 1 for k, v in model.state_dict().items()})
    reloaded = _key(mod, model, x)
    assert reloaded != key, "weights written in place (a channels_last copy is derived)"
    model.conv.weight = torch.nn.Parameter(model.conv.weight.detach().clone())
    assert _key(mod, model, x) != reloaded, "a weight replaced by another tensor"
    region = next(iter(mod.KOPT_REGIONS))
    before = _key(mod, model, x)
    mod.KOPT_REGIONS[region] = "torch"
    assert _key(mod, model, x) != before, "a region switched to PyTorch"


def test_graph_only_where_the_copies_cost_less_than_the_host_time_saved(tmp_path: Path) -> None:
    _, _, mod = _candidate("softmax", tmp_path)
    mod.FORWARD_STEPS = 40
    assert mod._graph_pays(64 * 1024, 2), "a network of small layers"
    assert not mod._graph_pays(1 << 30, 2), "a 1 GB softmax gains nothing from a graph"
    mod.FORWARD_STEPS, mod.FORWARD_TRITON = 3, 0
    assert not mod._graph_pays(1024, 2), "three aten ops: the replay's own steps cost as much"
    # one Triton kernel beside a library call: its launch costs several aten ops' host time
    # (a 128x16x30x30 convolution's epilogue on an H200: 0.152 ms a call op by op, 0.033
    # replayed, 2026-12-02)
    mod.FORWARD_STEPS, mod.FORWARD_TRITON = 3, 1
    assert mod._graph_pays(1_500_000 + 7_400_000, 2)
    assert not mod._graph_pays(64 << 20, 2), "its copies would cost more than it saves"


def test_the_search_times_op_by_op_where_a_graph_may_replay() -> None:
    from kopt.phases.engineers.offline.regions import replays_graph

    def source(steps: int, triton: int, graph: bool = True) -> str:
        return f"KOPT_GRAPH = {graph}\nFORWARD_STEPS = {steps}\nFORWARD_TRITON = {triton}\n"

    assert replays_graph(source(3, 1)) and replays_graph(source(2, 1))
    assert replays_graph(source(40, 0))
    assert not replays_graph(source(3, 0)), "three aten steps never pay"
    assert replays_graph(source(1, 1)), "one launch costs more than a replay's three steps"
    assert not replays_graph(source(40, 10, graph=False))
    assert replays_graph("KOPT_GRAPH = True\nFORWARD_STEPS = 5\n"), "an older file"


def test_outputs_are_cloned_through_tuples_and_other_values_kept(tmp_path: Path) -> None:
    _, _, mod = _candidate("softmax", tmp_path)
    a, b = torch.randn(3), torch.randn(2, 2)
    out = mod._clone_out((a, [b, None], 7))
    assert out[0] is not a and torch.equal(out[0], a) and torch.equal(out[1][0], b)
    assert out[1][1] is None and out[2] == 7
    assert [t.shape for t in mod._out_tensors((a, [b, None], 7))] == [a.shape, b.shape]


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU path (Triton's interpreter)")
def test_cpu_forward_runs_op_by_op(tmp_path: Path) -> None:
    case, _, mod = _candidate("softmax", tmp_path)
    model = build_model(case, "smoke", cls=mod.ModelNew)
    x = agent_provide_inputs(case, "smoke").args[0]
    model(x)
    assert graph_report(model) == {"replayed": 0, "op_by_op": []}, "no graph without a GPU"


def test_a_graphs_captured_ops_are_counted_at_each_replay(monkeypatch: pytest.MonkeyPatch) -> None:
    """The capture hooks on a stand-in for the driver's capture: ops dispatched between
    capture_begin and capture_end are noted into the recorder active at every replay."""
    cls = torch.cuda.CUDAGraph
    for attr in ("capture_begin", "capture_end", "replay"):
        monkeypatch.setattr(cls, attr, lambda self, *a, **k: None)
    counter = guards.LaunchCounter()
    counter._install_graph_hooks()

    class Graph:  # weak-referenceable, like torch.cuda.CUDAGraph
        pass

    graph = Graph()
    x = torch.randn(64)
    cls.capture_begin(graph)
    monkeypatch.setattr(guards, "_capturing", lambda: True)  # the stream captures: nothing runs
    with guards.OpRecorder() as during:
        torch.exp(x)
    monkeypatch.setattr(guards, "_capturing", lambda: False)
    cls.capture_end(graph)
    assert during.compute_ops() == ["exp"] and not during.elements, "named, not counted"
    seen: list[tuple[str, int]] = []
    for replays in (1, 2):
        with guards.OpRecorder(sink=lambda name, n: seen.append((name, n))) as recorder:
            cls.replay(graph)
        assert recorder.compute_ops() == ["exp"] and seen == [("exp", 64)] * replays
    assert counter.intact() == []


def test_a_failed_capture_puts_the_callers_stream_back(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """torch.cuda.graph's exit ends the capture before it restores the caller's stream: a
    capture that fails there (seen on an H200: KernelBench 2/88 rejected once, "left a
    different current CUDA stream after forward") must not leave its side stream current.
    A stand-in for torch.cuda.graph fails the way torch's does; the forward's first result
    comes back and the key runs op by op."""
    _, _, mod = _candidate("softmax", tmp_path)
    current = ["caller"]

    class FailingCapture:
        def __init__(self, *args, **kwargs) -> None:
            pass

        def __enter__(self) -> None:
            current[0] = "capture side stream"

        def __exit__(self, *exc) -> None:
            raise RuntimeError("CUDA error: operation not permitted when stream is capturing")

    cuda = mod.torch.cuda
    monkeypatch.setattr(cuda, "graph", FailingCapture)
    monkeypatch.setattr(cuda, "CUDAGraph", lambda: object())
    monkeypatch.setattr(cuda, "graph_pool_handle", lambda: "pool")
    monkeypatch.setattr(cuda, "current_stream", lambda device=None: current[0])
    monkeypatch.setattr(cuda, "set_stream", lambda stream: current.__setitem__(0, stream))

    class Module:
        _kopt_pool = None
        _kopt_graphs: dict = {}

    x = torch.randn(8)
    first, entry = mod._capture(Module(), torch.exp, (x,))
    assert current == ["caller"], "the caller's stream is current again"
    assert torch.equal(first, torch.exp(x)) and entry.startswith("capture failed: RuntimeError")
    current[0] = "caller"
    assert mod._capture_direct(Module(), torch.exp, (x,)) is None and current == ["caller"]


def _replayed_matches_op_by_op(mod, model, x: torch.Tensor) -> torch.Tensor:  # type: ignore[no-untyped-def]
    """model(x) replayed, checked against the same forward op by op (`KOPT_GRAPH = False`)."""
    replayed = model(x)
    mod.KOPT_GRAPH = False
    try:
        plain = model(x)
    finally:
        mod.KOPT_GRAPH = True
    torch.testing.assert_close(replayed, plain)
    return replayed


@pytest.mark.gpu
def test_replayed_forward_matches_op_by_op_after_new_weights_and_values(tmp_path: Path) -> None:
    case, _, mod = _candidate("conv2d_relu_bias", tmp_path)
    model = build_model(case, "smoke", device="cuda", cls=mod.ModelNew)
    x = agent_provide_inputs(case, "smoke", device="cuda").args[0]
    mod.FORWARD_STEPS = 100  # a graph pays at this size (the case itself has 3 steps)
    first = model(x)  # op by op, then captured
    assert graph_report(model) == {"replayed": 1, "op_by_op": []}
    again = model(x)  # replayed
    assert again.data_ptr() != first.data_ptr(), "each call returns its own output"
    torch.testing.assert_close(again, first)
    x.copy_(torch.randn_like(x))
    model.load_state_dict({k: v * 0.5 for k, v in model.state_dict().items()})
    replayed = _replayed_matches_op_by_op(mod, model, x)
    assert not torch.equal(replayed, first)


@pytest.mark.gpu
def test_a_graph_evicted_last_leaves_a_pool_the_next_capture_can_use(tmp_path: Path) -> None:
    """The module's graphs share one memory pool; when the only graph kept is evicted the pool
    goes with it, and a capture into the old handle failed in the allocator (seen on an H200,
    2026-12-02): the next key runs op by op. A fresh pool serves it instead."""
    case, _, mod = _candidate("conv2d_relu_bias", tmp_path)
    model = build_model(case, "smoke", device="cuda", cls=mod.ModelNew)
    x = agent_provide_inputs(case, "smoke", device="cuda").args[0]
    mod.FORWARD_STEPS, mod.MAX_GRAPHS = 100, 1
    model(x)
    model(x[:1].clone())  # a new key: the first graph evicted, this one captured
    (entry,) = model._kopt_graphs.values()
    assert not isinstance(entry, str), entry
    _replayed_matches_op_by_op(mod, model, x[:1].clone())


@pytest.mark.gpu
def test_inputs_at_the_same_addresses_replay_over_their_own_memory(tmp_path: Path) -> None:
    case, _, mod = _candidate("conv2d_relu_bias", tmp_path)
    model = build_model(case, "smoke", device="cuda", cls=mod.ModelNew)
    x = agent_provide_inputs(case, "smoke", device="cuda").args[0]
    mod.FORWARD_STEPS = 100
    for _ in range(3):  # op by op and captured; copied in; the same address again
        model(x)
    (entry,) = model._kopt_graphs.values()
    assert entry[3].get((x.data_ptr(),)), "a graph over x itself"
    x.copy_(torch.randn_like(x))  # new values where the graph reads them
    direct = model(x)
    other = torch.randn_like(x)  # another address: the copying graph
    copied = model(other)
    mod.KOPT_GRAPH = False
    try:
        torch.testing.assert_close(direct, model(x))
        torch.testing.assert_close(copied, model(other))
    finally:
        mod.KOPT_GRAPH = True
    assert direct.data_ptr() != model(x).data_ptr(), "each call returns its own output"


@pytest.mark.gpu
def test_verifier_accepts_a_replayed_forward_and_counts_its_launches(tmp_path: Path) -> None:
    from kopt.harness.verify import verify_candidate

    _, file, _ = _candidate("layernorm_gelu", tmp_path)
    # every forward of the verification replays a graph (each input set, each draw)
    file.write_text(file.read_text().replace("FORWARD_STEPS = ", "FORWARD_STEPS = 10**6 + "))
    report = verify_candidate("layernorm_gelu", file, device="cuda")
    assert report.accepted, [(c.name, c.detail) for c in report.checks if not c.passed]
    assert "(0-" not in report.check("triton_launched").detail


@pytest.mark.gpu
def test_inputs_rotating_between_a_few_buffers_each_get_a_graph_over_their_memory(
        tmp_path: Path) -> None:
    """A pipeline (or the harness's timer) rotating three input buffers: each buffer, seen
    again, gets its own graph over its memory; each call reads the values its buffer holds."""
    case, _, mod = _candidate("conv2d_relu_bias", tmp_path)
    model = build_model(case, "smoke", device="cuda", cls=mod.ModelNew)
    x = agent_provide_inputs(case, "smoke", device="cuda").args[0]
    mod.FORWARD_STEPS = 100
    bufs = [x, torch.randn_like(x), torch.randn_like(x)]
    for _ in range(2):
        for b in bufs:
            model(b)
    (entry,) = model._kopt_graphs.values()
    assert sorted(entry[3]) == sorted((b.data_ptr(),) for b in bufs), entry[3].keys()
    for b in bufs:
        b.copy_(torch.randn_like(b))
        _replayed_matches_op_by_op(mod, model, b)


@pytest.mark.gpu
def test_a_small_output_of_large_inputs_replays_only_over_input_memory(tmp_path: Path) -> None:
    """Copying the logits in would cost more than the graph saves, cloning a scalar loss out
    would not: no copying graph; inputs seen again replay over their own memory, new ones run
    op by op."""
    case, _, mod = _candidate("cross_entropy", tmp_path)
    model = build_model(case, "smoke", device="cuda", cls=mod.ModelNew)
    args = agent_provide_inputs(case, "smoke", device="cuda").args
    mod.FORWARD_STEPS, mod.COPY_BYTES_PER_US = 100, 1.0  # any input copy too dear, a scalar not
    first = model(*args)
    (entry,) = model._kopt_graphs.values()
    assert entry[0] is None and entry[3] == {}, entry
    again = model(*args)  # the same memory: a graph over it
    assert entry[3].get(tuple(a.data_ptr() for a in args if isinstance(a, torch.Tensor)))
    torch.testing.assert_close(again, first)
    assert graph_report(model) == {"replayed": 1, "op_by_op": []}
    other = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
    torch.testing.assert_close(model(*other), first)  # a new address: op by op


@pytest.mark.gpu
def test_a_forward_judged_op_by_op_does_not_build_the_weight_key_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where no graph pays, the verdict is kept by the inputs' form: later calls of that form
    run op by op without reading every weight's pointer and version (per-call host work a
    large model would pay for nothing)."""
    case, _, mod = _candidate("softmax", tmp_path)
    model = build_model(case, "smoke", device="cuda", cls=mod.ModelNew)
    x = agent_provide_inputs(case, "smoke", device="cuda").args[0]
    mod.FORWARD_STEPS, mod.COPY_BYTES_PER_US = 100, 1.0  # every copy too dear
    first = model(x)
    assert graph_report(model)["op_by_op"], "the first call judged the key op by op"
    keys = []
    real_key = mod._graph_key
    monkeypatch.setattr(mod, "_graph_key", lambda *a: keys.append(a) or real_key(*a))
    torch.testing.assert_close(model(x), first)
    assert keys == [], "the op-by-op verdict was found by the inputs' form"
    torch.testing.assert_close(model(x[:1].contiguous()), first[:1])
    assert len(keys) == 1, "another input form is judged on its own"
