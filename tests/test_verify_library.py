"""Library calls (GEMM, convolution, attention) that the baseline makes may stay in a
candidate: the offline engineer keeps them and generates the graph between them. Everything
else the baseline computes must not run in PyTorch."""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F

from kopt.harness.roofline import flop_counter
from kopt.harness.verify import verify_candidates

CORPUS = Path(__file__).resolve().parent / "corpus"


def test_a_kept_library_gemm_is_not_a_fallback_but_a_torch_epilogue_is() -> None:
    honest, cheat = verify_candidates(
        CORPUS / "cases" / "linear_relu_small",
        [CORPUS / "library" / "linear_relu_library_gemm.py",
         CORPUS / "library" / "library_gemm_with_torch_epilogue.py"], device="cpu")
    assert honest.accepted, honest.to_text()
    assert "library calls kept" in honest.check("no_pytorch_fallback").detail
    assert not cheat.accepted
    assert not cheat.check("no_pytorch_fallback").passed, cheat.to_text()


def test_attention_flops_count_grouped_query_attention() -> None:
    """Key and value with fewer heads than the query (GQA): 4 * b * h_q * s_q * s_k * d."""
    q, kv = torch.randn(2, 8, 16, 32), torch.randn(2, 2, 16, 32)
    with flop_counter() as counter:
        F.scaled_dot_product_attention(q, kv, kv, enable_gqa=True)
    assert counter.get_total_flops() == 4 * 2 * 8 * 16 * 16 * 32


def test_a_library_family_the_baseline_calls_is_kept_whole() -> None:
    """`linear` in the baseline may become `mm` plus a fused bias in the candidate."""
    from kopt.harness.verification.guards import library_ops_of

    kept = library_ops_of({"addmm", "gelu"})
    assert {"mm", "addmm", "bmm"} <= kept and "gelu" not in kept
    assert "cudnn_convolution" not in kept and library_ops_of({"relu"}) == frozenset()
    # an LSTM is oneDNN's fused layer on the CPU and cuDNN's on a GPU: kept, not a fallback
    rnn = library_ops_of({"mkldnn_rnn_layer", "addmm"})
    assert {"_cudnn_rnn", "mkldnn_rnn_layer", "mm"} <= rnn and "sigmoid" not in rnn
    # oneDNN's layer stacks its layers' final states through ATen: the layer's work, kept
    # with it, never on its own
    assert "stack" in rnn and library_ops_of({"stack", "add"}) == frozenset()


def test_the_channel_carries_shapes_and_scalars_marshal_refuses() -> None:
    import marshal

    from kopt.harness.jobs.supervised import _wire

    msg = {"shape": torch.Size([3, 1]), "n": torch.tensor(3).item(), "dtype": torch.float32}
    assert marshal.loads(marshal.dumps(_wire(msg))) == {"shape": [3, 1], "n": 3,
                                                        "dtype": "torch.float32"}


def _separable_case(tmp: Path):
    from tests.test_offline_fusion import _constructor_case

    return _constructor_case(
        tmp, "separable", "c, o", ["self.dw = nn.Conv2d(c, c, 3, padding=1, groups=c)",
                                   "self.pw = nn.Conv2d(c, o, 1)"],
        ["return self.pw(self.dw(x))"], "c: 4, o: 6", [2, 4, 9, 8], "c: 3, o: 5", [1, 3, 7, 6])


def test_a_library_call_replaced_by_a_kernel_is_not_a_fallback(tmp_path: Path) -> None:
    """KernelBench's depthwise-separable convolution: the baseline is two convolutions, the
    candidate generates the depthwise one and keeps the 1x1 in cuDNN. It still calls every op
    family the baseline calls, but not all of the baseline's library work: accepted."""
    from kopt.phases.engineers.offline import generate_candidate
    from tests.test_offline_fusion import _accepted_on_cpu

    case = _separable_case(tmp_path)
    _accepted_on_cpu(tmp_path, case, generate_candidate(case).source)


DECOY = '''
import torch
import torch.nn as nn
import torch.nn.functional as F
import triton
import triton.language as tl


@triton.jit
def _copy(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


class ModelNew(nn.Module):
    def __init__(self, c, o):
        super().__init__()
        self.dw = nn.Conv2d(c, c, 3, padding=1, groups=c)
        self.pw = nn.Conv2d(c, o, 1)

    def forward(self, x):
        y = self.pw(self.dw(x)).contiguous()
        out = torch.empty_like(y)
        _copy[(triton.cdiv(y.numel(), 1024),)](y, out, y.numel(), BLOCK=1024)
        return out
'''


def test_every_library_call_beside_a_decoy_kernel_is_a_fallback(tmp_path: Path) -> None:
    from kopt.harness.verify import verify_candidate

    case = _separable_case(tmp_path)
    file = tmp_path / "decoy.py"
    file.write_text(DECOY)
    report = verify_candidate(case, file, device="cpu")
    assert not report.accepted
    assert not report.check("no_pytorch_fallback").passed, report.to_text()


def test_a_query_op_below_the_recorder_is_not_a_hidden_op() -> None:
    """An LSTM asks `cudnn_is_acceptable` before it dispatches: the profiler records that
    query, the dispatch-mode recorder never sees it, and it computes nothing (level-3 38 was
    rejected as hiding PyTorch work for it); a compute op the recorder missed still counts."""
    from kopt.harness.jobs.candidate import _Trace
    from kopt.harness.verification.guards import OpRecorder

    x = torch.randn(4, 4)
    trace = _Trace("cpu")
    trace.start()
    with OpRecorder() as recorder:
        torch.cudnn_is_acceptable(x)
        x.exp()
    trace.stop()
    assert trace.events is not None, "the profiler did not start"
    assert any("cudnn_is_acceptable" in str(e.name) for e in trace.events)
    assert trace.hidden_ops(set(recorder.ops)) == []
    assert trace.hidden_ops(set()) == ["exp"]
