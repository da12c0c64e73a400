"""The comparison helper and the default tolerances (SPEC.md, "Verification")."""

from __future__ import annotations

import math

import pytest
import torch

from harness.compare import compare_outputs, compare_tensor
from harness.tolerance import Tolerance, default_tolerance


@pytest.mark.parametrize("dtype, precision, atol, rel", [
    (torch.float32, "strict", 1e-4, 1e-5),
    (torch.float32, "tf32", 5e-3, 2e-3),
    (torch.float16, "strict", 1e-2, 2e-3),
    (torch.bfloat16, "strict", 1e-2, 1e-2),
])
def test_spec_default_tolerances(dtype: torch.dtype, precision: str, atol: float, rel: float) -> None:
    tol = default_tolerance(dtype, precision)
    assert (tol.atol, tol.rtol, tol.rel) == (atol, atol, rel)


def test_integer_outputs_must_match_exactly() -> None:
    ref = torch.arange(10)
    assert default_tolerance(torch.int64).exact
    assert compare_tensor(ref.clone(), ref, default_tolerance(torch.int64)).ok
    bad = ref.clone()
    bad[3] += 1
    result = compare_tensor(bad, ref, default_tolerance(torch.int64))
    assert not result.ok and result.mismatches == 1 and result.first_bad[0][0] == (3,)


@pytest.mark.parametrize("shape", [(1823, 7), (6, 42, 13), (1,)])
def test_within_tolerance_passes(shape: tuple[int, ...]) -> None:
    ref = torch.randn(shape)
    out = ref + 1e-7 * torch.randn(shape)
    result = compare_outputs([out], [ref])
    assert result.ok, result.to_text()


def test_report_lists_first_bad_indices_with_both_values() -> None:
    ref = torch.zeros(4, 5)
    out = ref.clone()
    out[2, 3] = 0.5
    result = compare_outputs([out], [ref])
    assert not result.ok
    t = result.tensors[0]
    assert t.mismatches == 1 and t.first_bad == [((2, 3), 0.5, 0.0)]
    assert "[2,3] got 0.5 want 0" in result.to_text()


def test_zeros_for_tiny_outputs_fail_on_relative_error() -> None:
    ref = torch.full((64,), 1e-3)
    tol = Tolerance(atol=1e-2, rtol=1e-2, rel=1e-2)
    result = compare_tensor(torch.zeros(64), ref, tol)
    assert result.mismatches == 0  # the element-wise bound alone would pass it
    assert not result.ok and "relative error" in result.problem
    assert result.rel_err == pytest.approx(1.0)


def test_nan_only_where_reference_has_nan() -> None:
    ref = torch.tensor([1.0, float("nan"), float("inf"), 2.0])
    same = ref.clone()
    assert compare_tensor(same, ref, default_tolerance(torch.float32)).ok
    out = ref.clone()
    out[0] = float("nan")
    out[2] = -float("inf")
    result = compare_tensor(out, ref, default_tolerance(torch.float32))
    assert not result.ok
    assert result.nan_inf_mismatches == 2 and result.nonfinite_where_ref_finite == 1


def test_structure_mismatches_are_reported() -> None:
    ref = torch.randn(3, 4)
    assert "2 outputs, expected 1" in compare_outputs([ref, ref], [ref]).to_text()
    assert "shape (4, 3)" in compare_outputs([ref.t()], [ref]).to_text()
    assert "dtype torch.float16" in compare_outputs([ref.half()], [ref]).to_text()


def test_snr_is_reported() -> None:
    ref = torch.ones(100)
    out = ref * 1.1
    t = compare_tensor(out, ref, default_tolerance(torch.float32))
    assert t.snr_db == pytest.approx(20.0, abs=0.01)
    assert math.isfinite(t.rel_err) and "SNR 20.0 dB" in t.to_text()
