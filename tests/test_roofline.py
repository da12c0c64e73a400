"""Roofline: bytes that must move, FLOPs, ceilings and the floor."""

from __future__ import annotations

from pathlib import Path

import pytest

from kopt.harness.case import load_case
from kopt.harness.roofline import (
    Ceilings,
    Cost,
    bound,
    case_cost,
    case_dtype,
    ceilings,
    floor_ms,
    pct_of_floor,
    throughput,
)

LINEAR_MODEL = """
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, d_in: int = 128, d_out: int = 256):
        super().__init__()
        self.proj = nn.Linear(d_in, d_out)

    def forward(self, x):
        return self.proj(x).relu()
"""


def _linear_case(root: Path, flops: float | None = None) -> Path:
    d = root / "linear_relu"
    d.mkdir()
    (d / "model.py").write_text(LINEAR_MODEL)
    extra = f"flops: {flops}\n" if flops is not None else ""
    (d / "manifest.yaml").write_text(
        "name: linear_relu\n"
        "model: {module: model.py, class: Model, init_kwargs: {d_in: 128, d_out: 256}}\n"
        "inputs:\n  args:\n    - {shape: [32, 128], dtype: float32}\n" + extra
        + "smoke:\n  args: [{shape: [4, 16]}]\n  init_kwargs: {d_in: 16, d_out: 8}\n")
    return d


def test_layernorm_gelu_smoke_moves_inputs_weights_and_outputs_once(workspace: Path) -> None:
    case = load_case("layernorm_gelu")
    cost = case_cost(case, "smoke")  # (64, 256) bf16 in and out, weight+bias of 256 bf16
    assert cost.input_bytes == 64 * 256 * 2
    assert cost.weight_bytes == 2 * 256 * 2
    assert cost.output_bytes == 64 * 256 * 2
    assert cost.bytes == 66560
    assert cost.flops == 0.0  # pointwise and norms: memory-bound by construction
    assert case_dtype(case, "smoke") == "bfloat16"


def test_layernorm_gelu_main_is_sized_from_the_manifest(workspace: Path) -> None:
    cost = case_cost(load_case("layernorm_gelu"), "main")
    assert cost.bytes == 2 * 16384 * 4096 * 2 + 2 * 4096 * 2


def test_matmul_flops_from_the_counter_and_manifest_override(workspace: Path) -> None:
    case = load_case(_linear_case(workspace))
    cost = case_cost(case, "main")
    assert cost.flops == 2 * 32 * 128 * 256
    assert cost.flops_source == "counter"
    assert cost.bytes == 4 * (32 * 128 + 256 * 128 + 256 + 32 * 256)
    smoke = case_cost(case, "smoke")
    assert smoke.flops == 2 * 4 * 16 * 8
    assert smoke.weight_bytes == 4 * (8 * 16 + 8)


def test_manifest_flops_applies_to_main_inputs_only(tmp_path: Path, workspace: Path) -> None:
    case = load_case(_linear_case(tmp_path, flops=1.5e9))
    assert case_cost(case, "main").flops == 1.5e9
    assert case_cost(case, "main").flops_source == "manifest"
    assert case_cost(case, "smoke").flops == 2 * 4 * 16 * 8


H100ISH = Ceilings(copy_gbps=3000.0, bf16_tflops=700.0, fp16_tflops=700.0, tf32_tflops=400.0,
                   fp32_tflops=50.0, device_name="test", source="measured")


def test_floor_is_the_slower_of_memory_and_compute() -> None:
    mem_bound = Cost(bytes=3_000_000_000, flops=1e9)
    assert floor_ms(mem_bound, H100ISH, "bfloat16") == pytest.approx(1.0)
    assert bound(mem_bound, H100ISH, "bfloat16") == "memory"
    compute_bound = Cost(bytes=3_000_000, flops=50e9)
    assert floor_ms(compute_bound, H100ISH, "float32") == pytest.approx(1.0)
    assert bound(compute_bound, H100ISH, "float32") == "compute"
    # precision: tf32 lets float32 matmuls use the tensor cores' rate
    assert floor_ms(compute_bound, H100ISH, "float32", "tf32") == pytest.approx(0.125)


def test_pct_of_floor_and_throughput() -> None:
    assert pct_of_floor(0.5, 2.0) == pytest.approx(25.0)
    assert pct_of_floor(None, 2.0) is None
    rates = throughput(Cost(bytes=2_000_000_000, flops=4e12), 2.0)
    assert rates["gbps"] == pytest.approx(1000.0)
    assert rates["tflops"] == pytest.approx(2000.0)


def test_cpu_has_no_ceilings_and_no_floor() -> None:
    ceil = ceilings("cpu")
    assert ceil.source == "none" and ceil.copy_gbps is None and ceil.bf16_tflops is None
    assert floor_ms(Cost(bytes=1000, flops=0.0), ceil, "float32") is None
    assert bound(Cost(bytes=1000, flops=0.0), ceil, "float32") is None


@pytest.mark.gpu
def test_gpu_ceilings_are_measured_once_and_cached(workspace: Path) -> None:
    first = ceilings("cuda")
    assert first.source == "measured" and first.copy_gbps and first.copy_gbps > 100
    from kopt.harness.paths import cache_dir

    assert list((cache_dir() / "ceilings").glob("*.json"))
    assert ceilings("cuda") == first


def test_a_case_without_products_gets_the_short_timing_window(workspace: Path) -> None:
    """Memory-bound work (0 FLOPs) is timed in the timer's short window at any call length;
    a case with a product keeps the timer's defaults, which stretch for long calls."""
    from kopt.harness import timing
    from kopt.harness.roofline import timing_window

    short = timing_window(load_case("rmsnorm"), "smoke")
    assert short == {"min_seconds": timing.GPU_MIN_SECONDS,
                     "warmup_seconds": timing.GPU_WARMUP_SECONDS}
    assert timing_window(load_case("linear_bias_gelu"), "smoke") == {}
    assert timing_window(load_case("gated_mlp"), "smoke") == {}
    short["min_seconds"] = 99.0  # a caller's copy: the cached window is unchanged
    assert timing_window(load_case("rmsnorm"), "smoke")["min_seconds"] == timing.GPU_MIN_SECONDS


def test_the_timing_window_never_runs_a_model_for_real(
        workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A model that cannot run on the meta device (a data-dependent forward) gets the timer's
    defaults: the window is chosen in the parent, which must not build a GPU-sized model on
    the CPU to count FLOPs. A manifest's `flops:` decides for the main inputs."""
    import kopt.harness.roofline as roofline

    def no_real_build(*a, **k):  # type: ignore[no-untyped-def]
        raise AssertionError("the window built a real model")

    monkeypatch.setattr("kopt.harness.data.build_model", no_real_build)
    monkeypatch.setattr(roofline, "_meta_inputs", lambda *a, **k: (_ for _ in ()).throw(
        RuntimeError("data-dependent")))
    roofline._WINDOWS.clear()
    assert roofline.timing_window(load_case("rmsnorm"), "smoke") == {}
    monkeypatch.undo()
    roofline._WINDOWS.clear()
    assert roofline.timing_window(load_case("rmsnorm"), "smoke") != {}


def test_processes_that_need_the_ceilings_at_once_measure_them_once(
        workspace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A GPU suite starts several problems together: the first timing job measures the GPU,
    the others wait for its figures instead of measuring it again (a fake GPU: threads, each
    with its own lock handle, as separate processes have)."""
    import threading
    import time

    import torch

    from kopt.harness import roofline

    calls: list[int] = []

    def slow_measure() -> Ceilings:
        calls.append(1)
        time.sleep(0.3)
        return Ceilings(3000.0, 700.0, 650.0, 350.0, 50.0, device_name="Fake GPU",
                        source="measured")

    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "Fake GPU")
    monkeypatch.setattr(roofline, "measure_ceilings", slow_measure)
    seen: list[Ceilings] = []
    threads = [threading.Thread(target=lambda: seen.append(roofline.ceilings("cuda")))
               for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1 and len(seen) == 4
    assert {c.copy_gbps for c in seen} == {3000.0}
    roofline.ceilings("cuda", refresh=True)  # `kopt doctor --refresh` measures again
    assert len(calls) == 2


RECURRENT_LAYERS = {
    "lstm, projected, bidirectional": lambda nn: nn.LSTM(6, 10, 2, batch_first=True,
                                                         bidirectional=True, proj_size=4),
    "gru, no bias": lambda nn: nn.GRU(6, 10, 3, bias=False),
    "rnn relu, bidirectional": lambda nn: nn.RNN(6, 10, 1, nonlinearity="relu", bidirectional=True),
}


@pytest.mark.parametrize("layer", sorted(RECURRENT_LAYERS))
def test_a_recurrent_layer_is_counted_whole_with_the_cells_products(layer: str, monkeypatch) -> None:  # noqa: ANN001
    """A recurrent layer's FLOPs come from one formula over its weights (counting a 512-step
    LSTM cell by cell on the meta device took 12-28 s), equal to what torch's counter gives
    the layer's decomposition: projections, directions, layers, no bias, unbatched."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from kopt.harness import recurrent_ops
    from kopt.harness.roofline import _count

    whole = []
    formula = recurrent_ops.recurrent_flops
    monkeypatch.setattr(recurrent_ops, "recurrent_flops", lambda *a, **k: whole.append(1) or formula(*a, **k))
    torch.manual_seed(0)
    net = RECURRENT_LAYERS[layer](torch.nn)
    for x in (torch.randn(3, 7, 6), torch.randn(7, 6)):
        with torch.no_grad(), FlopCounterMode(display=False) as cells:
            want = net(x)
        whole.clear()
        got, flops = _count(net, [x], {})
        assert whole == [1]  # the layer, once
        assert flops == cells.get_total_flops() > 0
        torch.testing.assert_close(got, want)
