"""The offline engineer's capture: an in-place op on a fresh intermediate is exported as its
out-of-place op before the decompositions (`capture.out_of_place`), and only there.

Each model is exported as the engineer exports it (every input dim dynamic), rewritten,
decomposed, and run on inputs of another size against eager: a rewrite that changed what any
value holds would show there.
"""

from __future__ import annotations

import torch
from torch.export import Dim

from kopt.phases.engineers.offline.capture import _forward_arg_names
from kopt.phases.engineers.offline.in_place import out_of_place


def _exported(model: torch.nn.Module, x: torch.Tensor):  # type: ignore[no-untyped-def]
    dims = {"x": {i: Dim.AUTO for i in range(x.dim())}}
    with torch.no_grad():
        return torch.export.export(model.eval(), (x,), dynamic_shapes=dims)


def _in_place_calls(ep) -> list[str]:  # type: ignore[no-untyped-def]
    return [str(n.target) for n in ep.graph.nodes if n.op == "call_function"
            and getattr(n.target, "overloadpacket", None) is not None
            and n.target.overloadpacket.__name__.endswith("_")
            and not n.target.overloadpacket.__name__.startswith("_")]


def _same_as_eager(model: torch.nn.Module, ep, x: torch.Tensor) -> None:  # type: ignore[no-untyped-def]
    program = ep.run_decompositions()
    with torch.no_grad():
        want = model(x.clone())
        got = program.module()(x.clone())
    torch.testing.assert_close(got, want)


class Activations(torch.nn.Module):
    """A convolution stack with in-place activations and an in-place residual add."""

    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Conv2d(4, 4, 3, padding=1)
        self.b = torch.nn.Conv2d(4, 4, 3, padding=1)
        self.six = torch.nn.ReLU6(inplace=True)
        self.relu = torch.nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.six(self.a(x))
        before = y * 0.5  # read before the next op writes y in place
        z = self.b(y)
        z.add_(x)
        return self.relu(z) + before


def test_in_place_ops_on_fresh_results_are_exported_out_of_place() -> None:
    torch.manual_seed(0)
    model = Activations()
    ep = _exported(model, torch.randn(2, 4, 8, 8))
    assert sorted(_in_place_calls(ep)) == ["aten.add_.Tensor", "aten.hardtanh_.default",
                                           "aten.relu_.default"]
    assert out_of_place(ep.graph_module) == 3
    assert _in_place_calls(ep) == []
    _same_as_eager(model, ep, torch.randn(3, 4, 5, 7) * 4)


class Shared(torch.nn.Module):
    """In-place writes that another value sees: an input, a view of a result, and a result
    that `type_as` returned as itself."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(6, 6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.lin(x)
        y[:, :2].relu_()  # a view: y changes
        w = y.type_as(x)  # y itself
        w.mul_(2.0)  # y changes
        x.abs_()  # the caller's input
        return y + w + x


def test_in_place_ops_another_value_sees_stay_in_place() -> None:
    torch.manual_seed(0)
    model = Shared()
    ep = _exported(model, torch.randn(4, 6))
    before = _in_place_calls(ep)
    assert len(before) == 3, before
    assert out_of_place(ep.graph_module) == 0
    assert _in_place_calls(ep) == before
    _same_as_eager(model, ep, torch.randn(5, 6))


class TwoInputs(torch.nn.Module):
    def forward(self, tokens: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        return tokens * scale


def test_forward_argument_names_come_from_the_program_as_its_module_names_them() -> None:
    import inspect

    ep = torch.export.export(TwoInputs(), (torch.randn(3), torch.randn(3)))
    unlifted = list(inspect.signature(ep.module().forward).parameters)
    assert _forward_arg_names(ep, 2) == unlifted == ["tokens", "scale"]
    assert _forward_arg_names(ep, 1) == ["tokens"]


class Promoting(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(6, 6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.lin(x)
        y.add_(x.double())  # stays float32: y + x.double() would be float64
        return y


def test_an_in_place_op_whose_operand_would_promote_stays_in_place() -> None:
    torch.manual_seed(0)
    model = Promoting()
    ep = _exported(model, torch.randn(4, 6))
    assert _in_place_calls(ep) == ["aten.add_.Tensor"]
    assert out_of_place(ep.graph_module) == 0
    program = ep.run_decompositions()
    x = torch.randn(5, 6)
    with torch.no_grad():
        got = program.module()(x)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, model(x).detach())
