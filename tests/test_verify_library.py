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


def test_the_channel_carries_shapes_and_scalars_marshal_refuses() -> None:
    import marshal

    from kopt.harness.jobs.supervised import _wire

    msg = {"shape": torch.Size([3, 1]), "n": torch.tensor(3).item(), "dtype": torch.float32}
    assert marshal.loads(marshal.dumps(_wire(msg))) == {"shape": [3, 1], "n": 3,
                                                        "dtype": "torch.float32"}
