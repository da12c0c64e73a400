"""Recurrent layers kept whole through torch.export (`phases/engineers/offline/recurrent.py`):
one library call in the candidate, the same aten op eager runs, and outputs that match eager's
on the CPU interpreter."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from kopt.phases.engineers.offline import generate_candidate
from kopt.phases.engineers.offline.recurrent import aten_target, whole_recurrent_layers
from tests.test_offline import _check_case, _load_candidate
from tests.test_offline_fusion import _constructor_case

LAYERS = {
    "lstm": ("nn.LSTM(6, hidden, 2, batch_first=True, bidirectional=True)", "aten.lstm.input"),
    "gru": ("nn.GRU(6, hidden, 3, batch_first=True)", "aten.gru.input"),
    "rnn": ("nn.RNN(6, hidden, 1, nonlinearity='relu')", "aten.rnn_relu.input"),
}


@pytest.mark.parametrize("kind", sorted(LAYERS))
def test_a_recurrent_layer_is_one_library_call_of_the_candidate(tmp_path: Path, kind: str) -> None:
    layer, op = LAYERS[kind]
    width = "hidden * 2" if "bidirectional" in layer else "hidden"
    case = _constructor_case(tmp_path, kind, "hidden",
                             [f"self.rnn = {layer}", f"self.fc = nn.Linear({width}, 5)"],
                             ["out, _ = self.rnn(x)", "return torch.relu(self.fc(out[:, -1, :]))"],
                             "hidden: 12", [3, 7, 6], "hidden: 12", [2, 5, 6])
    result = generate_candidate(case)
    left = [u["op"] for u in result.unfused]
    assert left == [op], result.unfused  # one node: the layer, not its cells
    assert f"torch.ops.{op}(" in result.source and "kopt::" not in result.source
    # the export held the layer as one custom op (shapes from its fake), not its cells
    from kopt.phases.engineers.offline.capture import _EXPORTS

    exported = [str(n.target) for ep, *_ in _EXPORTS.values() for n in ep.graph.nodes]
    assert f"kopt.{op.split('.')[1]}.default" in exported, sorted(set(exported))[:20]
    module = _load_candidate(result.source, tmp_path, kind)
    _check_case(case, module, "main")
    _check_case(case, module, "smoke")


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
