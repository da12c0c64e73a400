"""Peak memory of one forward call on the CPU (harness.memory)."""

from __future__ import annotations

import torch

from kopt.harness.memory import cpu_peak_bytes, resident_bytes

MB = 1 << 20


def test_a_large_temporary_counts_until_it_is_dropped() -> None:
    x = torch.ones(MB // 4)  # 1 MB of float32

    def forward() -> torch.Tensor:
        wide = x.repeat(16)  # 16 MB alive while it is reduced
        return wide.sum()

    peak = cpu_peak_bytes(forward, [x])
    assert 17 * MB <= peak < 18 * MB


def test_freed_intermediates_do_not_accumulate() -> None:
    x = torch.ones(MB // 4)

    def forward() -> torch.Tensor:
        y = x
        for _ in range(10):
            y = y * 2  # the previous y is gone once the next op has run
        return y

    peak = cpu_peak_bytes(forward, [x])
    assert 2 * MB <= peak <= 4 * MB  # resident + at most two live results, not 11 MB


def test_views_of_inputs_and_shared_storages_count_once() -> None:
    x = torch.ones(MB // 4)
    assert resident_bytes([x, x.view(2, -1), x[::2]]) == MB
    peak = cpu_peak_bytes(lambda: x.view(2, -1).t(), [x])
    assert peak == MB
