"""State a model keeps outside its state_dict (`harness.model_state`): plain tensor attributes
that forward reads and replaces, as KernelBench's level-3 VanillaRNN carries its hidden state
from one call to the next."""

from __future__ import annotations

import re
from pathlib import Path

import torch
import torch.nn as nn

from kopt.harness import model_state
from kopt.phases.engineers.offline.engineer import generate_candidate
from tests.test_offline_fusion import _constructor_case


class _Cell(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 3)
        self.h = torch.randn(2, 3)


class _Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.cell = _Cell()
        self.count = torch.zeros(1)
        self.register_buffer("kept", torch.ones(2))


def test_attributes_are_found_by_path_and_travel_beside_the_state_dict() -> None:
    net = _Net()
    assert sorted(model_state.tensor_attributes(net)) == ["cell.h", "count"]
    weights = model_state.weights_of(net)
    assert set(weights) == {"cell.lin.weight", "cell.lin.bias", "kept",
                            "attribute:cell.h", "attribute:count"}
    other = _Net()
    loaded = model_state.load(other, weights)  # strict on the state_dict's keys
    assert torch.equal(other.cell.h, net.cell.h) and other.cell.h is not weights["attribute:cell.h"]
    assert torch.equal(other.cell.lin.weight, net.cell.lin.weight)
    other.cell.h = other.cell.h + 1  # what forward's `self.h = ...` does
    model_state.restart(other, loaded)
    assert torch.equal(other.cell.h, net.cell.h)
    assert model_state.after_call(other, ["cell.h", "gone"])[1].numel() == 0


RNN_LAYERS = ["self.hidden = torch.randn(4, hidden)",
              "self.i2h = nn.Linear(inp + hidden, hidden)",
              "self.h2o = nn.Linear(hidden, out)"]
RNN_FORWARD = ["self.hidden = self.hidden.to(x.device)",
               "combined = torch.cat((x, self.hidden), dim=1)",
               "self.hidden = torch.tanh(self.i2h(combined))",
               "return self.h2o(self.hidden)"]


def test_a_cell_that_carries_its_hidden_state_is_verified_and_its_state_checked(tmp_path: Path) -> None:
    """The generated candidate reads the hidden state at every call (never the traced value)
    and writes the new one back; one that forgets the write, or keeps the traced value as a
    constant, is wrong: the verifier starts every call from fresh state and compares the state
    a call leaves like an output."""
    from kopt.harness.verify import verify_candidates

    case = _constructor_case(tmp_path, "rnn", "inp, hidden, out", RNN_LAYERS, RNN_FORWARD,
                             "inp: 24, hidden: 20, out: 12", [4, 24],
                             "inp: 12, hidden: 10, out: 6", [4, 12])
    result = generate_candidate(case, input_set="smoke")
    assert "self.hidden = out[-1]" in result.source, result.source[-2500:]
    assert "_kopt_c_" not in result.source  # no traced value embedded
    good = tmp_path / "good.py"
    good.write_text(result.source)
    forgets = tmp_path / "forgets.py"
    forgets.write_text(result.source.replace("self.hidden = out[-1]", "pass"))
    frozen = tmp_path / "frozen.py"  # the traced state as a constant, read instead of self.hidden
    frozen.write_text(re.sub(r"self\.hidden\.to\((\w+)\.device\)",
                             r"torch.zeros_like(self.hidden).to(\1.device)", result.source))
    assert frozen.read_text() != result.source
    reports = verify_candidates(case, [good, forgets, frozen], device="cpu")
    assert reports[0].accepted, reports[0].to_text()
    assert "correct" in reports[1].failed(), reports[1].to_text()
    assert "correct" in reports[2].failed(), reports[2].to_text()
