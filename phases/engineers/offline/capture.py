"""Capture a case's model with `torch.export` and lower it to the offline engineer's graph.

Export runs on the CPU on the case's inputs, with every input dim marked dynamic
(`Dim.AUTO`), so the sizes the model derives from its inputs stay symbolic; sizes tied to
parameters specialise (the candidate reads those from its own parameters at run time).
Decompositions run to core ATen; the composites the generator fuses are kept and lowered
by `graph.py`.
"""

from __future__ import annotations

import logging
import math
import operator
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import sympy
import torch
from torch.export import Dim
from torch.fx.experimental.symbolic_shapes import is_concrete_int

from kopt.harness.case import Case
from kopt.harness.data import build_model
from kopt.harness.errors import EngineerError
from kopt.harness.model_state import tensor_attributes
from kopt.harness.recurrent_ops import aten_target, whole_recurrent_layers
from kopt.phases.engineers.offline.complex_values import lower_complex, materialized
from kopt.phases.engineers.offline.constructor_sizes import (
    generalise_constructor,
    has_constructor_numbers,
)
from kopt.phases.engineers.offline.convolution import depthwise_window, lower_depthwise_convolution
from kopt.phases.engineers.offline.graph import (
    _SIMPLE,
    _VIEWS,
    MAX_CAT_PARTS,
    MAX_POOL_TAPS,
    MAX_WINDOW_TAPS,
    TAKE,
    WINDOW_TAP,
    Builder,
    Graph,
    InputInfo,
    LibraryCall,
    Node,
    Sym,
    broadcasts_to,
    group_norm_map,
    lower_cat,
    lower_group_norm,
    lower_layer_norm,
    lower_logsumexp,
    lower_mean,
    lower_pad,
    lower_reduction,
    lower_softmax,
    lower_tap_pool,
    lower_var,
    lower_window_pool,
    norm_dim,
    normalize,
    scan_after_fill,
    state_var,
)
from kopt.phases.engineers.offline.in_place import out_of_place
from kopt.phases.engineers.offline.layout import constructor_ints
from kopt.phases.engineers.offline.lead import generalise_lead, lead_input
from kopt.phases.engineers.offline.scatter import lower_interleave_view, lower_slice_scatter
from kopt.phases.engineers.offline.split_k import lower_split_k
from kopt.phases.engineers.offline.split_k import slices as split_k_slices


@dataclass
class Captured:
    """A captured model: the lowered graph, the model it came from and its example inputs."""

    graph: Graph
    model: torch.nn.Module
    args: list[Any]
    kwargs: dict[str, Any]
    dynamic: bool
    """True when export kept input dims symbolic."""
    fixed_lead: int | None = None
    """The first tensor input's leading size when the program has it as a constant (a static
    export, or a dynamic one that specialised it: the model derives a size from it through
    `int()`, a Python loop, a branch) and a second trace could not make it symbolic again
    (`lead.generalise_lead`): the candidate then runs at that size only."""
    lead_sizes: int = 0
    """Sizes made expressions of the leading size again from a second trace (0: none needed,
    or not possible)."""
    constructor_numbers: int = 0
    """Numbers made expressions of the constructor's arguments from a second trace at another
    input set's arguments (`constructor_sizes`)."""
    loop_over_lead: bool = False
    """The program reads each row of its leading input by index (`loops_over_lead`): a Python
    loop over the leading size, fixed at the traced count of steps."""


EXPORT_CACHE_SIZE = 8
"""Exported programs kept per process (`_exported`): each optimizer round and policy back-off
captures the same model again, and torch.export is most of codegen for a deep model (ResNet101
on a 2-core CPU, 2026-11-26: 45 s of 56 s, of which run_decompositions 29 s)."""
_EXPORTS: dict[str, tuple[Any, bool, torch.nn.Module, list[Any], dict[str, Any]]] = {}


def _fingerprint(case: Case, input_set: str) -> str | None:
    """What an export depends on: the model file's bytes, the input set as resolved, the
    torch version; None when the model file cannot be read."""
    import hashlib

    try:
        source = case.model_file.read_bytes()
    except OSError:
        return None
    h = hashlib.sha256(source)
    h.update(repr((case.manifest.model.model_dump() if hasattr(case.manifest.model, "model_dump")
                   else case.manifest.model, case.input_set(input_set), torch.__version__)).encode())
    return h.hexdigest()


def warm_up() -> float:
    """Export and lower a two-op model once: the first export of a process imports and sets
    up most of torch.export, dynamo's guards and sympy (1.3-2 s on a 2-core CPU, 2026-11-30:
    KernelBench level-1 problem 1's codegen took 2.34 s first in a process, every later
    problem 0.24-1.05 s), which is the process's cost, not the first problem's. Seconds taken."""
    import time

    t0 = time.perf_counter()

    class _Tiny(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.relu(x).sum(-1)

    try:
        ep, _ = _export(_Tiny(), [torch.empty(3, 5, device="meta")], {})
        lower_program(ep)
    except Exception:  # noqa: BLE001 - a warm-up: the first real capture reports any trouble
        pass
    return time.perf_counter() - t0


def capture(case: Case, input_set: str = "main", *, constructor: bool = True) -> Captured:
    """Export the case's model on `input_set` and lower the program.

    The model is built on the meta device (export reads shapes, not values): a 32768x32768
    float32 linear layer took minutes to initialise and seed on the CPU, for nothing. A model
    with non-persistent buffers or plain tensor attributes (state the candidate reads at every
    call, `harness.model_state`, never embeds), or one that does not build or export on meta,
    is built on the CPU with its weights. The exported program is kept for the next capture of
    the same model and input set in this process; lowering reads it without changing it."""
    key = _fingerprint(case, input_set)
    if key is not None and key in _EXPORTS:
        ep, dynamic, model, args, kwargs = _EXPORTS[key]
        graph = lower_program(ep, constructor_ints(case, input_set), input_set_shapes(case))
        captured = Captured(graph, model, args, kwargs, dynamic, fixed_leading_size(ep))
    else:
        captured, ep = _capture(case, input_set)
        _keep(key, (ep, captured.dynamic, captured.model, captured.args, captured.kwargs))
    lead = _lead_to_retrace(case, input_set, captured)
    if lead is not None:
        _retrace_lead(case, input_set, captured, key, lead)
    if constructor:
        _retrace_constructor(case, input_set, captured)
    return captured


RETRACE_ALWAYS_NODES = 300
"""A program of at most this many lowered nodes is traced again at the other constructor
arguments whatever `has_constructor_numbers` guesses: its export costs about a second, and the
guess misses numbers it cannot tell apart from chance (a score scale `1 / math.sqrt(64)` is
8.0, whole; a rotary split `[64, 64]` is half of `head_dim`). Larger programs (ResNet-101's
second export is seconds of a 2-core CPU) trace again only where the guess finds one."""


def _retrace_constructor(case: Case, input_set: str, captured: Captured) -> None:
    """Numbers the model derived from its constructor's integers made expressions of them
    (`constructor_sizes.generalise_constructor`), from a trace at the first other input set
    whose constructor integers differ; only when the program holds such a number at all.
    Otherwise `captured` is left as is (its numbers stay fixed at the traced constructor)."""
    ints = constructor_ints(case, input_set)
    for other in case.input_set_names():
        other_ints = constructor_ints(case, other)
        if other == input_set or set(other_ints) != set(ints) or other_ints == ints:
            continue
        moved = {k: v for k, v in ints.items() if other_ints[k] != v}
        if len(captured.graph.nodes) > RETRACE_ALWAYS_NODES and \
                not has_constructor_numbers(captured.graph, moved):
            return
        try:
            second = capture(case, other, constructor=False)
            captured.constructor_numbers = generalise_constructor(
                captured.graph, second.graph, ints, other_ints)
        except Exception:  # noqa: BLE001 - best effort: a model that does not trace there, or
            pass  # another program at those arguments, keeps its traced numbers
        return


def _lead_to_retrace(case: Case, input_set: str, captured: Captured) -> int | None:
    """The leading size a second trace should try to make symbolic: the one export fixed, or
    the traced one where a size list holds it as a number while the input's stays symbolic
    (export evaluates `int()` of a size to a constant without guarding on it). Traced sizes
    under 3 are not looked for: 1s and 2s are everywhere in size lists."""
    from kopt.harness.verification.draws import leading_size

    if captured.fixed_lead is not None:
        return captured.fixed_lead
    lead = leading_size(_trace_set(case, input_set))
    if lead is None or lead < 3:
        return None

    def holds(v: Any) -> bool:
        return isinstance(v, (list, tuple)) and any(
            (type(x) is int and x == lead) or holds(x) for x in v)

    return lead if any(holds(a) for n in captured.graph.nodes for a in n.args) else None


def _keep(key: str | None, entry: Any) -> None:
    if key is None:
        return
    while len(_EXPORTS) >= EXPORT_CACHE_SIZE:
        _EXPORTS.pop(next(iter(_EXPORTS)))
    _EXPORTS[key] = entry


def _retrace_lead(case: Case, input_set: str, captured: Captured, key: str | None, lead: int) -> None:
    """Sizes fixed at the traced leading size `lead` made expressions of it again where a
    second export, one row more, is the same program up to its sizes
    (`lead.generalise_lead`); otherwise `captured` is left as is."""
    from kopt.harness.verification.draws import leading_size, with_leading

    source = lead_input(captured.graph)
    first = case.input_set(input_set)
    if source is None or leading_size(first) not in (lead, 1):
        return
    if loops_over_lead(captured.graph, source, lead):
        captured.loop_over_lead = True
        return  # a second trace unrolls one step more: no program of the same shape to fit
    second_key = None if key is None else f"{key}:lead+1"
    try:
        if second_key in _EXPORTS:
            ep = _EXPORTS[second_key][0]
        else:
            model = captured.model
            device = next((t.device.type for t in [*model.parameters(), *model.buffers()]), "cpu")
            args, kwargs = example_inputs(case, with_leading(first, lead + 1, first.name), device=device)
            ep, _ = _export(model, args, kwargs)
            _keep(second_key, (ep,))
        second = lower_program(ep, constructor_ints(case, input_set), input_set_shapes(case))
        captured.lead_sizes = generalise_lead(captured.graph, second, lead, lead + 1, source)
    except Exception:  # noqa: BLE001 - a best-effort step: any failure leaves the first trace as is
        return  # (a loop over the leading size, a model that needs that size: it stays fixed)
    captured.fixed_lead = None


def loops_over_lead(graph: Graph, source: str, lead: int) -> bool:
    """Whether the program reads every row of its leading input by a constant index, `x[0]`
    to `x[lead - 1]`: a Python loop over the leading size, unrolled by export (a hand-written
    RNN over its sequence). A trace one row larger is then a different program, one step
    longer, so the second export of `_retrace_lead` cannot make the size symbolic again
    (KernelBench level-3 34: 256 steps, 30-60 s of a 2-core CPU's codegen for that export)."""
    name = source.removesuffix(".shape[0]")
    rows = {n.args[2] for n in graph.nodes
            if n.op == "select_index" and len(n.args) >= 3 and getattr(n.args[0], "name", None) == name
            and n.args[1] == 0 and type(n.args[2]) is int}
    return lead >= 3 and rows >= set(range(lead))


def _capture(case: Case, input_set: str) -> tuple[Captured, Any]:
    trace = _trace_set(case, input_set)
    model = _meta_model(case, input_set)
    if model is not None:
        args, kwargs = example_inputs(case, input_set, device="meta")
        try:
            ep, dynamic = _export(model, args, kwargs, example_inputs(case, trace, device="meta"))
            if any(isinstance(v, torch.Tensor) and v.is_meta for v in ep.constants.values()):
                # a tensor forward makes from a number (`torch.tensor(0.0, device=x.device)`,
                # KernelBench level-2 83 and 93) is a constant of the program, with no value on
                # meta: the CPU build below has it
                raise NotImplementedError("a tensor constant made in forward has no value on meta")
            graph = lower_program(ep, constructor_ints(case, input_set), input_set_shapes(case))
            return Captured(graph, model, args, kwargs, dynamic, fixed_leading_size(ep)), ep
        except (EngineerError, RuntimeError, TypeError, ValueError, NotImplementedError):
            pass  # a model that needs real tensors: the CPU build below
    model = build_model(case, input_set, device="cpu")
    args, kwargs = example_inputs(case, input_set)
    ep, dynamic = _export(model, args, kwargs, example_inputs(case, trace))
    graph = lower_program(ep, constructor_ints(case, input_set), input_set_shapes(case))
    return Captured(graph, model, args, kwargs, dynamic, fixed_leading_size(ep)), ep


def fixed_leading_size(ep: Any) -> int | None:
    """The exported program's first tensor input's leading size when it is a constant, not
    a symbol; None when it stayed symbolic (or there is no such input)."""
    user = set(ep.graph_signature.user_inputs)
    for node in ep.graph.nodes:
        if node.op != "placeholder" or node.name not in user:
            continue
        val = node.meta.get("val")
        if isinstance(val, torch.Tensor) and val.dim() >= 1:
            lead = val.shape[0]  # a SymInt whose expression may be a number: specialised
            return int(lead) if is_concrete_int(lead) else None
    return None


def input_set_shapes(case: Case) -> list[list[tuple[int, ...] | None]]:
    """Each input set's forward inputs (positional, then keyword) as shapes; None for a
    scalar."""
    from kopt.harness.case import TensorSpec

    out = []
    for name in case.input_set_names():
        rs = case.input_set(name)
        out.append([tuple(s.shape) if isinstance(s, TensorSpec) else None
                    for s in [*rs.args, *rs.kwargs.values()]])
    return out


TRACED_LEAD = 2
"""The leading size a batch of one is traced at. torch.export fixes a size of 0 or 1 in the
program it exports (its 0/1 specialisation, whatever `Dim.AUTO` says): a candidate generated on
a batch of one kept that 1 in a view, and failed on every other leading size the verifier
runs. The sizes that share the first input's leading size (`with_leading`, the verifier's own
rule) are traced at 2 and stay symbolic; a static export (the fallback) uses the set itself."""


def _trace_set(case: Case, input_set: str) -> Any:
    """The input set export traces dynamically: `input_set` itself, or with a leading size of
    1 widened to `TRACED_LEAD`."""
    from kopt.harness.verification.draws import leading_size, with_leading

    resolved = case.input_set(input_set)
    if leading_size(resolved) != 1:
        return resolved
    return with_leading(resolved, TRACED_LEAD, resolved.name)


def _meta_model(case: Case, input_set: str) -> torch.nn.Module | None:
    from kopt.harness.data import instantiate, model_class

    try:
        with torch.device("meta"):
            model = instantiate(model_class(case), case.input_set(input_set), case.model_file)
    except Exception:  # noqa: BLE001 - a constructor that needs real tensors
        return None
    if tensor_attributes(model) or any(m._non_persistent_buffers_set for m in model.modules()):
        return None  # state the candidate reads: built on the CPU, with its draws
    return model.eval()


def example_inputs(case: Case, input_set: str | Any, device: str = "cpu"
                   ) -> tuple[list[Any], dict[str, Any]]:
    """Inputs with the input set's shapes, dtypes and layouts: export reads no values, so
    uninitialised memory does (drawing the main inputs of a large case takes seconds, and
    zero-filling causal_softmax's 1 GB took 1 s of its codegen time)."""
    from kopt.harness.case import TensorSpec
    from kopt.harness.data import TORCH_DTYPES

    resolved = case.input_set(input_set) if isinstance(input_set, str) else input_set

    def make(spec: Any) -> Any:
        if not isinstance(spec, TensorSpec):
            return spec.value
        shape = list(spec.shape)
        if not spec.contiguous and len(shape) >= 2:
            shape[-1], shape[-2] = shape[-2], shape[-1]
            return torch.empty(shape, dtype=TORCH_DTYPES[spec.dtype], device=device).transpose(-1, -2)
        return torch.empty(shape, dtype=TORCH_DTYPES[spec.dtype], device=device)

    return [make(a) for a in resolved.args], {k: make(v) for k, v in resolved.kwargs.items()}


SOLVER_LOGGER = "torch.fx.experimental.symbolic_shapes"
"""Export's size-constraint solver logs a warning with a full traceback when sympy cannot
reduce an inequality (a square root of a size: KernelBench level-1 92 printed 60 lines of it
into the suite's output); the export itself goes on. Errors still show."""


SPECIALISED_LOGGER = "torch._export.non_strict_utils"
"""Export's warning that it fixed a size of 1 (`0/1 specialized`): the engineer exports the set
itself when widening its leading size would change what the program computes (`_takes`), and
says nothing a user can act on."""


@contextmanager
def _quiet(name: str) -> Iterator[None]:
    """Records under ERROR from logger `name` dropped meanwhile (a filter: torch's logging
    set-up, which export may run, resets logger levels)."""
    log = logging.getLogger(name)

    def keep(record: logging.LogRecord) -> bool:
        return record.levelno >= logging.ERROR

    log.addFilter(keep)
    try:
        yield
    finally:
        log.removeFilter(keep)


def _export(model: torch.nn.Module, args: list[Any], kwargs: dict[str, Any],
            traced: tuple[list[Any], dict[str, Any]] | None = None) -> tuple[Any, bool]:
    """The exported program and whether its sizes are symbolic: a dynamic export on `traced`
    (inputs of the same set that export does not specialise; default `args`, `kwargs`); where
    that fails, one whose leading sizes alone are symbolic (a `view` after `AvgPool2d(7)` over
    symbolic spatial sizes asks the solver an inequality it cannot solve: a MobileNet), else a
    static one on `args`, `kwargs`."""
    def dims(v: Any, lead_only: bool) -> Any:
        if not isinstance(v, torch.Tensor):
            return None
        return {i: Dim.AUTO for i in range(min(v.dim(), 1) if lead_only else v.dim())}

    errors = []
    for dynamic, lead_only in ((True, False), (True, True), (False, False)):
        try:
            ds, a, kw = None, args, kwargs
            if dynamic:
                a, kw = traced or (args, kwargs)
                ds = {"args": tuple(dims(v, lead_only) for v in a),
                      "kwargs": {k: dims(v, lead_only) for k, v in kw.items()}}
                ds = _match_signature(model, a, kw, ds)
            with torch.no_grad(), warnings.catch_warnings(), _quiet(SOLVER_LOGGER), _quiet(SPECIALISED_LOGGER):
                # torch's own deprecation inside export's copy of the input spec: nothing a
                # user can act on, and it was the one stray line in `kopt run`'s output
                warnings.filterwarnings("ignore", message=".*LeafSpec.*", category=FutureWarning)
                with whole_recurrent_layers(), _attributes_as_buffers(model) as state:
                    ep = torch.export.export(model, tuple(a), kw, dynamic_shapes=ds)
                if dynamic and traced is not None and not _takes(ep, args):
                    # the widened leading size met another input's size and export made them
                    # one symbol (a (1, C) beside a (2, C) it broadcasts against): export the set
                    return _export(model, args, kwargs)
                try:
                    out_of_place(ep.graph_module)
                except Exception:  # noqa: BLE001 - a saving of time: the program as exported is right
                    pass
                ep = ep.run_decompositions(_decomposition_table())
                ep.kopt_state = state  # read by lower_program
                return ep, dynamic
        except Exception as err:  # noqa: BLE001 - any export failure: try static, then report
            errors.append(f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}")
    raise EngineerError(f"torch.export could not capture the model ({errors[-1]})",
                        fix="make forward traceable (no data-dependent Python control flow)")


@contextmanager
def _attributes_as_buffers(model: torch.nn.Module) -> Iterator[tuple[str, ...]]:
    """Plain tensor attributes (`self.hidden = torch.randn(...)`: state outside the
    state_dict, `harness.model_state`) made non-persistent buffers while export runs, and
    their dotted paths: export then lifts each as an input read at every call, instead of a
    constant holding the traced value, and records forward's `self.hidden = h` as a buffer
    mutation, which `lower_program` turns into a state write. Put back as they were after.
    A non-persistent buffer is lifted so already, and counted among the paths."""
    moved: list[tuple[torch.nn.Module, str, torch.Tensor]] = []
    found = tensor_attributes(model)  # non-persistent buffers too: read like state
    for path, value in found.items():
        owner, _, name = path.rpartition(".")
        module = model.get_submodule(owner) if owner else model
        if name in module._buffers:
            continue  # a non-persistent buffer already: export lifts it as it is
        delattr(module, name)
        module.register_buffer(name, value, persistent=False)
        moved.append((module, name, value))
    try:
        yield tuple(found)
    finally:
        for module, name, value in moved:  # the value before export (it traced a copy)
            module._buffers.pop(name, None)
            module._non_persistent_buffers_set.discard(name)
            object.__setattr__(module, name, value)


def _takes(ep: Any, args: list[Any]) -> bool:
    """Whether the program exported on widened inputs (`_trace_set`) can take the input set's
    own positional tensors: each size it fixed is theirs, and each symbol stands for one size
    across them."""
    user = set(ep.graph_signature.user_inputs)
    vals = [n.meta.get("val") for n in ep.graph.nodes if n.op == "placeholder" and n.name in user]
    bound: dict[Any, int] = {}
    for val, real in zip(vals, args, strict=False):
        if not isinstance(val, torch.Tensor) or not isinstance(real, torch.Tensor):
            continue
        if val.dim() != real.dim():
            return False
        for s, n in zip(val.shape, real.shape, strict=True):
            if is_concrete_int(s):
                if int(s) != n:
                    return False
            elif isinstance(s.node.expr, sympy.Symbol) and bound.setdefault(s.node.expr, n) != n:
                return False
    return True


# Library calls that stay whole in the candidate: decomposing attention would replace
# flash attention with a materialised (T, T) score matrix that no generated kernel beats.
LIBRARY_OPS = ("scaled_dot_product_attention", "_scaled_dot_product_flash_attention_for_cpu",
               "_scaled_dot_product_attention_math",
               # recurrent layers: cuDNN's fused cells. Decomposed, an LSTM over 512 steps
               # unrolls into a graph the partitioner took over 14 minutes (and 2 GB) on
               "lstm", "gru", "rnn_tanh", "rnn_relu")


# Allocations whose contents are unspecified until written (lowered to a constant 0).
UNINITIALIZED = frozenset({"empty", "empty_like", "empty_permuted", "empty_strided", "new_empty",
                           "new_empty_strided"})


# Ops core ATen keeps whole that decompose into what the engine lowers: resampling becomes
# index arithmetic and takes, an adaptive pool with whole windows an average pool.
# (Not `Tensor.unfold`: its decomposition is an `as_strided` with the traced strides, wrong for
# an input laid out otherwise; kept, it is a view the reading kernel loads through.)
EXTRA_DECOMPOSED = ("upsample_nearest1d.vec", "upsample_nearest2d.vec", "upsample_nearest3d.vec",
                    "upsample_linear1d.vec", "upsample_linear1d.default",
                    "upsample_bilinear2d.vec", "upsample_bilinear2d.default",
                    "upsample_trilinear3d.vec", "upsample_trilinear3d.default",
                    "_adaptive_avg_pool2d.default", "grid_sampler_2d.default")


def _decomposition_table() -> Any:
    """torch.export's core-ATen table without the library calls of `LIBRARY_OPS`, with
    `EXTRA_DECOMPOSED`."""
    from torch._decomp import decomposition_table

    table = torch.export.default_decompositions()
    for name in EXTRA_DECOMPOSED:
        packet, overload = name.split(".")
        op = getattr(getattr(torch.ops.aten, packet, None), overload, None)
        if op is not None and op in decomposition_table:
            table[op] = decomposition_table[op]
    for op in list(table.keys()):
        if op.overloadpacket.__name__ in LIBRARY_OPS:
            table.pop(op)
    return table


def _match_signature(model: torch.nn.Module, args: list[Any], kwargs: dict[str, Any],
                     ds: dict[str, Any]) -> Any:
    """dynamic_shapes keyed by forward's parameter names (what export expects)."""
    import inspect

    params = [p for p in inspect.signature(model.forward).parameters.values()
              if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if any(p.kind == p.VAR_POSITIONAL for p in inspect.signature(model.forward).parameters.values()):
        return tuple(ds["args"]) + tuple(ds["kwargs"].values()) if not ds["kwargs"] else None
    out: dict[str, Any] = {}
    for p, d in zip(params, ds["args"], strict=False):
        out[p.name] = d
    out.update(ds["kwargs"])
    return out


def _val(n: torch.fx.Node) -> Any:
    return n.meta.get("val")


def _size(s: Any) -> tuple[int, Any]:
    if isinstance(s, torch.SymInt):
        expr = s.node.expr
        hint = s.node.hint if s.node.hint is not None else int(s.node.shape_env.size_hint(expr))
        if isinstance(expr, sympy.Integer):
            return int(expr), int(expr)
        return int(hint), expr
    return int(s), int(s)


STATE_INDEX = 1_000_000
"""Where the indices of state inputs (`InputInfo.index`) start: after every forward argument,
in the order forward reads them."""


MAX_EXPORTED_OPS = 10_000
"""The most calls an exported program may have for the offline engineer to lower and
partition it (ResNet101 has 452). Past this a Python loop was unrolled (a
recurrent model stepping over 512 positions in forward): codegen would run for tens of
minutes, so it stops at once and says why."""


def lower_program(ep: Any, ctor_ints: dict[str, int] | None = None,
                  set_shapes: list[list[tuple[int, ...] | None]] | None = None) -> Graph:
    """The exported program as a lowered `Graph`; `ctor_ints` (the model's integer constructor
    arguments) let a size the model fixes from one of them follow it (a group count);
    `set_shapes` (each input set's tensor shapes, by forward position: `input_set_shapes`)
    tell a lowering the sizes the candidate must also run at (split-K's slice count)."""
    calls = sum(1 for n in ep.graph.nodes if n.op == "call_function")
    if calls > MAX_EXPORTED_OPS:
        raise EngineerError(f"the exported model has {calls:,} ops (a loop in forward unrolled?); "
                            f"the offline engineer handles up to {MAX_EXPORTED_OPS:,}",
                            fix="keep PyTorch for this model, or make a case of one step of the loop")
    sig = ep.graph_signature
    b = Builder(ctor_ints)
    env: dict[str, Any] = {}
    inputs: dict[str, InputInfo] = {}
    symbols: dict[str, str] = {}
    params = dict(sig.inputs_to_parameters)
    buffers = dict(sig.inputs_to_buffers)
    constants = dict(getattr(sig, "inputs_to_lifted_tensor_constants", {}))
    user_inputs = [s.arg.name for s in sig.input_specs if s.kind.name == "USER_INPUT"]
    fwd_names = _forward_arg_names(ep, len(user_inputs))
    state = set(getattr(ep, "kopt_state", ()))

    for fx in ep.graph.nodes:
        if fx.op == "placeholder":
            val = _val(fx)
            if not isinstance(val, torch.Tensor):
                if fx.name not in user_inputs or not isinstance(val, (int, float, bool)):
                    raise EngineerError(f"forward input {fx.name!r} is not a tensor",
                                        fix="the offline engineer handles tensor and scalar inputs")
                # a Python scalar: export specialised the graph on its value
                i = user_inputs.index(fx.name)
                inputs[fx.name] = InputInfo("scalar", fwd_names[i] if i < len(fwd_names) else f"arg{i}", index=i)
                env[fx.name] = val
                continue
            shape, sym = zip(*[_size(s) for s in val.shape], strict=False) if val.dim() else ((), ())
            node = b.add(Node(fx.name, "input", [], {}, tuple(shape), tuple(sym), val.dtype,
                              origin=fx.name))
            env[fx.name] = node
            if fx.name in params:
                inputs[node.name] = InputInfo("param", params[fx.name])
                b.state_keys[node] = ("param", params[fx.name])
            elif fx.name in buffers and buffers[fx.name] in state:
                key = buffers[fx.name]  # a plain tensor attribute: read at every call
                inputs[node.name] = InputInfo("state", key, index=STATE_INDEX + len(b.arg_names))
                b.arg_names[node] = state_var(key)
                b.arg_sizes[state_var(key)] = []
            elif fx.name in buffers:
                key = buffers[fx.name]  # (a non-persistent one is state, read like an attribute)
                inputs[node.name] = InputInfo("buffer", key)
                b.state_keys[node] = ("buffer", key)
            elif fx.name in constants:
                inputs[node.name] = InputInfo("constant", constants[fx.name],
                                              value=ep.constants[constants[fx.name]])
            else:
                i = user_inputs.index(fx.name)
                arg_name = fwd_names[i] if i < len(fwd_names) else f"arg{i}"
                inputs[node.name] = InputInfo("arg", arg_name, index=i)
                b.arg_names[node] = arg_name
                b.arg_sizes[arg_name] = [shapes[i] for shapes in set_shapes or []
                                         if i < len(shapes) and shapes[i] is not None]
                for d, s in enumerate(sym):
                    if isinstance(s, sympy.Symbol) and str(s) not in symbols:
                        symbols[str(s)] = f"{arg_name}.shape[{d}]"
        elif fx.op == "call_function":
            env[fx.name] = _lower(b, fx, env)
        elif fx.op == "output":
            outs = fx.args[0]
            outputs = [materialized(b, env[o.name], o.name) if isinstance(o, torch.fx.Node) else o
                       for o in outs]
    user_outputs = [s for s in sig.output_specs if s.kind.name == "USER_OUTPUT"]
    # State writes (`self.hidden = h`) after forward's own outputs; other buffer mutations
    # are not kept, as before
    writes = [(spec.target, out) for spec, out in zip(sig.output_specs, outputs, strict=False)
              if spec.kind.name == "BUFFER_MUTATION" and spec.target in state]
    outputs = outputs[len(outputs) - len(user_outputs):] + [out for _, out in writes]
    spec = "single" if ep.call_spec.out_spec is not None and ep.call_spec.out_spec.is_leaf() else "tuple"
    return Graph(b.nodes, inputs, outputs, spec, {**symbols, **b.symbols}, dict(b.attributes),
                 [key for key, _ in writes], library_calls=dict(b.library_calls))


def _forward_arg_names(ep: Any, n: int) -> list[str]:
    """forward's first `n` parameter names, from the program's own record (what `ep.module()`
    names its forward's parameters with: unlifting the module to read them deep-copied the
    whole graph, 3.2 s of ResNet101's codegen on a 2-core CPU); else from that module."""
    import inspect

    graph = getattr(ep, "module_call_graph", None)
    signature = graph[0].signature if graph else None
    recorded = list(getattr(signature, "forward_arg_names", None) or [])
    if len(recorded) >= n and all(nm.isidentifier() for nm in recorded):
        return recorded[:n]
    try:
        module = ep.module()
        names = [p for p in inspect.signature(module.forward).parameters]
        if len(names) >= n and all(nm.isidentifier() for nm in names):
            return names[:n]
    except Exception:  # noqa: BLE001 - names are cosmetic; positional fallbacks work
        pass
    return [f"arg{i}" for i in range(n)]


def _arg(v: Any, env: dict[str, Any]) -> Any:
    if isinstance(v, torch.fx.Node):
        if env.get(v.name) is not None:
            return env[v.name]
        val = _val(v)
        if isinstance(val, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            hint, expr = _size(val) if isinstance(val, torch.SymInt) else (val.node.hint, val.node.expr)
            return Sym(expr, hint) if not isinstance(expr, (int, float)) else expr
        raise EngineerError(f"unsupported graph value {v.name!r}")
    if isinstance(v, (list, tuple)):
        return [_arg(x, env) for x in v]
    if isinstance(v, torch.SymInt):
        hint, expr = _size(v)
        return Sym(expr, hint) if not isinstance(expr, int) else expr
    return v


def _meta(fx: torch.fx.Node) -> tuple[tuple[int, ...], tuple[Any, ...], torch.dtype]:
    val = _val(fx)
    if isinstance(val, (list, tuple)):
        val = val[0]
    if not isinstance(val, torch.Tensor):
        return (), (), torch.float32
    if val.dim() == 0:
        return (), (), val.dtype
    shape, sym = zip(*[_size(s) for s in val.shape], strict=False)
    return tuple(shape), tuple(sym), val.dtype


def _lower(b: Builder, fx: torch.fx.Node, env: dict[str, Any]) -> Any:
    """Lower one exported call to primitive nodes; returns the node (or a tuple of nodes)."""
    target = fx.target
    name = fx.name
    if target is operator.getitem:
        src, i = materialized(b, env[fx.args[0].name], name), fx.args[1]
        if isinstance(src, tuple):
            return src[i]
        shape, sym, dtype = _meta(fx)
        return b.add(Node(name, "split_item" if src.op == "layout_fallback" else "getitem",
                          [src, i], {}, shape, sym, dtype, origin=name))
    if target in (operator.mul, operator.add, operator.sub, operator.floordiv, operator.mod,
                  operator.truediv, operator.neg, operator.pow, torch.sym_max, torch.sym_min,
                  torch.sym_float) or "sym_size" in str(target) or \
            "sym_numel" in str(target) or "sym_stride" in str(target):
        return None  # shape arithmetic: read through `_arg` as a Sym
    if not isinstance(target, torch._ops.OpOverload):
        if "_assert" in str(target):
            return None
        raise EngineerError(f"unsupported call {target!r} in the exported graph")
    packet = target.overloadpacket.__name__.rstrip("_") if target.overloadpacket.__name__ not in (
        "_softmax", "_log_softmax", "_to_copy", "_unsafe_view") else target.overloadpacket.__name__
    overload = target._overloadname
    args = [_arg(a, env) for a in fx.args]
    kwargs = {k: _arg(v, env) for k, v in fx.kwargs.items()}
    shape, sym, dtype = _meta(fx)
    if _untyped(fx) and not packet.startswith("_assert"):
        # complex values have no Triton type: products, sums and layout ops of them are
        # lowered on their real and imaginary parts (complex_values.py); any other op that
        # makes or reads one (an FFT) runs in PyTorch, the kernels taking the real values
        # around it
        lowered = lower_complex(b, packet, args, shape, sym, dtype, name)
        if lowered is not None:
            return lowered
        return _fallback(b, fx, materialized(b, args, name), materialized(b, kwargs, name),
                         shape, sym, dtype)

    def node(op: str, a: list[Any], **kw: Any) -> Node:
        return b.add(Node(name, op, a, kw, shape, sym, dtype, origin=name))

    def x0() -> Node:
        return args[0]

    if packet.startswith("_assert") or packet in ("_assert_tensor_metadata", "sym_constrain_range_for_size"):
        return None
    if packet in _SIMPLE:
        scalar_ok = packet in ("eq", "ne", "lt", "le", "gt", "ge", "minimum", "maximum", "fmod",
                               "remainder", "logical_and", "logical_or", "logical_xor",
                               "bitwise_and", "bitwise_or", "bitwise_xor")
        return node(_SIMPLE[packet], args[:2] if scalar_ok else args[:1])
    if packet in ("add", "sub"):
        a, c = args[0], args[1]
        alpha = kwargs.get("alpha", args[2] if len(args) > 2 else 1)
        if alpha != 1:
            c = b.op(f"{name}_alpha", "mul", [c, alpha], x0() if isinstance(c, Node) else x0(),
                     shape=c.shape if isinstance(c, Node) else (), sym=c.sym if isinstance(c, Node) else (),
                     dtype=dtype) if isinstance(c, Node) else c * alpha
        return node(packet, [a, c])
    if packet == "rsub":
        return node("sub", [args[1], args[0]])
    if packet == "mul":
        return node("mul", args[:2])
    if packet == "div":
        mode = kwargs.get("rounding_mode", args[2] if len(args) > 2 else None)
        op = {"floor": "truediv_floor", "trunc": "truediv_trunc"}.get(mode or "", "div")
        return node(op, args[:2])
    if packet == "pow":
        return node("pow", args[:2])
    if packet in ("clamp", "clip", "hardtanh"):
        lo = kwargs.get("min", args[1] if len(args) > 1 else (-1.0 if packet == "hardtanh" else None))
        hi = kwargs.get("max", args[2] if len(args) > 2 else (1.0 if packet == "hardtanh" else None))
        return node("clamp", [args[0], lo, hi])
    if packet == "clamp_min":
        return node("clamp", [args[0], args[1], None])
    if packet == "clamp_max":
        return node("clamp", [args[0], None, args[1]])
    if packet == "where":
        return node("where", args[:3])
    if packet == "masked_fill":
        return node("where", [args[1], args[2], args[0]])
    if packet == "gelu":
        approx = kwargs.get("approximate", args[1] if len(args) > 1 else "none")
        return node("gelu_tanh" if approx == "tanh" else "gelu", args[:1])
    if packet == "leaky_relu":
        return node("leaky_relu", [args[0], kwargs.get("negative_slope", args[1] if len(args) > 1 else 0.01)])
    if packet == "elu":
        # aten.elu(x, alpha, scale, input_scale): SELU is elu with scale and alpha set
        extra = [*args[1:4], *[1.0, 1.0, 1.0][len(args[1:4]):]]
        return node("elu", [args[0], *(float(kwargs.get(k, v)) for k, v in
                                       zip(("alpha", "scale", "input_scale"), extra, strict=True))])
    if packet == "softplus":
        return node("softplus", [args[0], args[1] if len(args) > 1 else 1.0,
                                 args[2] if len(args) > 2 else 20.0])
    if packet in ("_to_copy", "to", "convert_element_type", "type_as"):
        new = kwargs.get("dtype", dtype)
        return node("cast" if new != x0().dtype else "identity", [x0()])
    if packet in ("full_like", "zeros_like", "ones_like"):
        value = {"zeros_like": 0, "ones_like": 1}.get(packet, args[1] if len(args) > 1 else None)
        return node("full", [value])
    if packet == "full":
        return node("full", [args[1]])
    if packet in ("zeros", "ones", "new_zeros", "new_ones"):
        return node("full", [1 if "ones" in packet else 0])
    if packet == "scalar_tensor":
        return node("full", [args[0]])
    if packet in UNINITIALIZED:
        # Uninitialized memory holds no value a model may rely on: an element the model reads
        # back before writing it is undefined in eager too, so 0 is as good as any. What the
        # model writes into it (`out = empty_like(x); out[..., ::2] = a`) becomes the kernel's
        # output, with nothing allocated or read for the rest (an interleaved RoPE read a
        # 268 MB buffer of garbage only to overwrite it).
        return node("full", [0])
    if packet == "arange":
        if overload == "default":
            start, step = 0, 1
        else:
            start = args[0]
            step = args[2] if len(args) > 2 else kwargs.get("step", 1)
        return node("arange", [start, step])
    if packet in _VIEWS:
        op = _VIEWS[packet]
        if packet == "t":
            return node("permute", [x0(), [1, 0] if x0().rank == 2 else [0]])
        if packet == "transpose":
            r = x0().rank
            d0, d1 = norm_dim(args[1], r), norm_dim(args[2], r)
            perm = list(range(r))
            perm[d0], perm[d1] = perm[d1], perm[d0]
            return node("permute", [x0(), perm])
        if packet == "squeeze":
            r = x0().rank
            dims = args[1] if len(args) > 1 else [d for d in range(r) if x0().shape[d] == 1]
            dims = [dims] if isinstance(dims, int) else list(dims)
            dims = [norm_dim(d, r) for d in dims if x0().shape[norm_dim(d, r)] == 1]
            return node("squeeze", [x0(), dims])
        if packet == "unsqueeze":
            return node("unsqueeze", [x0(), norm_dim(args[1], x0().rank + 1)])
        if packet == "permute":
            return node("permute", [x0(), [norm_dim(d, x0().rank) for d in args[1]]])
        if op == "layout_fallback":
            if packet in ("split", "split_with_sizes") and len(args) > 1:
                # a split size the constructor fixes (`qkv.split(self.n_embd, dim=2)`) follows it
                def ctor(v: Any) -> Any:
                    return b.ctor_size(v) if type(v) is int else v

                sizes = args[1]
                args = [args[0], [ctor(v) for v in sizes] if isinstance(sizes, list) else ctor(sizes),
                        *args[2:]]
            n = node(op, args)
            n.target, n.multi = target, True
            vals = _val(fx)
            n.kwargs = dict(kwargs)
            n.shape = tuple(len(vals) for _ in range(1)) if isinstance(vals, (list, tuple)) else shape
            return n
        if op == "view" and isinstance(x0(), Node):
            woven = lower_interleave_view(b, x0(), tuple(shape), tuple(sym), dtype, name)
            if woven is not None:
                return woven
        if op == "view" and isinstance(x0(), Node) and x0().op == "view" and \
                isinstance(x0().args[0], Node) and x0().args[0].shape == tuple(shape) and \
                tuple(x0().args[0].sym) == tuple(sym) and x0().args[0].dtype == dtype:
            return x0().args[0]  # a view back to the shape its input viewed: that value itself
        n = node(op, args)
        n.target = target
        n.kwargs = dict(kwargs)
        return n
    if packet in ("argmax", "argmin") and isinstance(x0(), Node) and x0().rank >= 1 and \
            x0().dtype.is_floating_point and len(args) > 1 and args[1] is not None:
        keep = bool(args[2] if len(args) > 2 else kwargs.get("keepdim", False))
        return b.add(Node(name, packet, [x0()], {"dim": norm_dim(args[1], x0().rank),
                                                 "keepdim": keep}, shape, sym, dtype, origin=name))
    if packet in ("cumsum", "cumprod") and isinstance(x0(), Node) and x0().rank >= 1 and \
            x0().dtype.is_floating_point and dtype.is_floating_point and \
            kwargs.get("dtype") in (None, dtype):
        return b.add(Node(name, packet, [x0()], {"dim": norm_dim(args[1], x0().rank)}, shape,
                          sym, dtype, origin=name))
    if packet == "linalg_vector_norm":
        return _lower_vector_norm(b, fx, args, kwargs, shape, sym, dtype, name)
    if packet in ("sum", "mean", "amax", "amin", "var", "std", "var_mean", "logsumexp", "max", "min"):
        return _lower_reduce(b, fx, packet, overload, args, kwargs, shape, sym, dtype, name)
    if packet in ("_softmax", "_log_softmax", "softmax", "log_softmax"):
        x = x0()
        return lower_softmax(b, x, norm_dim(args[1], x.rank), name, name,
                             log="log" in packet, out_dtype=dtype)
    if packet == "_native_batch_norm_legit" and overload == "no_stats":
        return _lower_batch_stats_norm(b, fx, args, kwargs, shape, sym, dtype, name)
    if packet == "_native_batch_norm_legit_no_training" and x0().rank >= 2:
        return _lower_eval_batch_norm(b, args, name)
    if packet == "native_layer_norm":
        x, normalized = x0(), args[1]
        if len(normalized) == 1 or x.rank < len(normalized):
            return lower_layer_norm(b, x, args[2], args[3], float(args[4]), name, name)
        return _layer_norm_over_dims(b, x, len(normalized), args[2], args[3], float(args[4]), name)
    if packet == "native_group_norm" and x0().rank >= 2 and isinstance(args[6], int) and \
            x0().shape[1] % args[6] == 0:
        split = _split_group_norm(b, x0(), args[1], args[2], args[6], float(args[7]), name)
        if split is not None:
            return split
        return lower_group_norm(b, x0(), args[1], args[2], args[6], float(args[7]), name, name)
    if packet == "convolution" and len(args) >= 9:
        window = depthwise_window(x0(), args[1], args[3], args[4], args[5], args[6], args[8])
        if window is not None:
            return lower_depthwise_convolution(b, x0(), args[1], args[2], window, list(args[3]),
                                               list(args[4]), list(args[5]), name, name)
    if packet == "constant_pad_nd" and isinstance(x0(), Node):
        padded = lower_pad(b, x0(), list(args[1]) if isinstance(args[1], (list, tuple)) else [],
                           args[2] if len(args) > 2 else kwargs.get("value", 0), name, name)
        if padded is not None:
            return padded
    if packet in _POOLS:
        pooling = _pooling(packet, x0(), args, kwargs)
        if pooling is not None and (not packet.startswith("max") or _only_values_used(fx)):
            kind = "max" if packet.startswith("max") else "avg"
            if pooling.tiles and math.prod(pooling.window) <= MAX_WINDOW_TAPS and \
                    not (x0().op == WINDOW_TAP and x0().kwargs.get("pad")):
                out = lower_window_pool(b, x0(), pooling.window, kind, name, name)
            else:
                out = lower_tap_pool(b, x0(), pooling.window, pooling.stride, pooling.padding,
                                     pooling.dilation, kind, name, name, pooling.ceil)
            b.library_calls[out] = LibraryCall(f"{kind}_pool", (x0(),), (
                ("dims", _POOLS[packet]), ("kernel_size", pooling.window),
                ("stride", pooling.stride), ("padding", pooling.padding),
                ("dilation", pooling.dilation), ("ceil_mode", pooling.ceil),
                ("count_include_pad", pooling.count_include_pad)))
            return (out, None) if packet.endswith("with_indices") else out
        return _fallback(b, fx, args, kwargs, shape, sym, dtype)
    if packet == "cat" and isinstance(args[0], (list, tuple)) and args[0] and \
            len(args[0]) <= MAX_CAT_PARTS and \
            all(isinstance(x, Node) for x in args[0]) and len(shape) >= 1:
        dim = args[1] if len(args) > 1 else kwargs.get("dim", 0)
        scan = scan_after_fill(list(args[0]), dim, len(shape))
        fx_parts = fx.args[0] if fx.args and isinstance(fx.args[0], (list, tuple)) else []
        if scan is not None and fx_parts and len(getattr(fx_parts[-1], "users", ())) == 1:
            x = scan.args[0]  # the scan reads the cat of the fills and its own input instead
            inner = lower_cat(b, [*args[0][:-1], x], dim, shape, x.dtype, f"{name}_in", name)
            return b.add(Node(name, scan.op, [inner], {"dim": scan.kwargs["dim"]}, shape, sym,
                              dtype, origin=name))
        return lower_cat(b, list(args[0]), dim, shape, dtype, name, name)
    if packet == "slice_scatter" and len(args) >= 2:
        dim = args[2] if len(args) > 2 else kwargs.get("dim", 0)
        start = args[3] if len(args) > 3 else kwargs.get("start")
        end = args[4] if len(args) > 4 else kwargs.get("end")
        step = args[5] if len(args) > 5 else kwargs.get("step", 1)
        out = lower_slice_scatter(b, args[0], args[1], dim, start, end, step, name, name)
        if out is not None:
            return out
        return _fallback(b, fx, args, kwargs, shape, sym, dtype)
    if packet == "copy" and len(args) >= 2 and isinstance(args[0], Node) and \
            isinstance(args[1], Node) and broadcasts_to(args[1].shape, args[0].shape):
        # copy(dst, src) is src broadcast to dst's shape in dst's dtype (what `dst[...] = src`
        # exports as, before the scatter that writes it back): dst's values are never read
        src = args[1]
        if src.op == "full" and not isinstance(src.args[0], Node):  # `out[box] = 0.0`
            return node("full", [src.args[0]])
        if src.shape != args[0].shape:
            src = b.add(Node(f"{name}_expand", "expand", [src, [b.runtime_size(args[0], j) for j in
                                                                range(args[0].rank)]], {},
                             shape, sym, src.dtype, origin=name))
        return src if src.dtype == dtype and src.shape == tuple(shape) else node("cast", [src])
    if packet in ("embedding", "index_select", "index"):
        taken = _lower_take(b, packet, args, shape, sym, dtype, name)
        if taken is not None:
            return taken
        return _fallback(b, fx, args, kwargs, shape, sym, dtype)
    if packet == "gather":
        x, d, idx = args[0], norm_dim(args[1], args[0].rank), args[2]
        if isinstance(idx, Node) and idx.rank == x.rank and idx.shape[d] == 1 and \
                all(idx.shape[i] == x.shape[i] for i in range(x.rank) if i != d):
            return b.add(Node(name, "select", [x, idx], {"dim": d, "keepdim": True}, shape, sym,
                              dtype, origin=name))
        if isinstance(idx, Node) and isinstance(x, Node) and idx.rank == x.rank and \
                not idx.dtype.is_floating_point and idx.dtype != torch.bool and tuple(shape) == idx.shape:
            # out[c] = x[c with c_d = idx[c]]: a take at idx's own coordinates
            sizes = tuple(b.runtime_size(idx, j) for j in range(idx.rank))
            return b.add(Node(name, TAKE, [x, idx], {"dim": d, "gather": True}, shape, sizes, dtype,
                              origin=name))
        return _fallback(b, fx, args, kwargs, shape, sym, dtype)
    if packet == "mm" and (slices := split_k_slices(b, args[0], args[1])):
        return lower_split_k(b, args[0], args[1], slices, name, name)
    if packet in ("mm", "bmm"):
        return node(packet, args[:2])
    if packet == "addmm":
        beta = kwargs.get("beta", 1)
        alpha = kwargs.get("alpha", 1)
        s = split_k_slices(b, args[1], args[2])
        mm = lower_split_k(b, args[1], args[2], s, f"{name}_mm", name) if s else \
            b.add(Node(f"{name}_mm", "mm", args[1:3], {}, shape, sym, dtype, origin=name))
        if alpha != 1:
            mm = b.op(f"{name}_alpha", "mul", [mm, alpha], mm, origin=name)
        bias = args[0]
        if beta != 1:
            bias = b.op(f"{name}_beta", "mul", [bias, beta], bias, origin=name)
        return node("add", [mm, bias])
    return _fallback(b, fx, args, kwargs, shape, sym, dtype)


def _lower_reduce(b: Builder, fx: torch.fx.Node, packet: str, overload: str, args: list[Any],
                  kwargs: dict[str, Any], shape: tuple[int, ...], sym: tuple[Any, ...],
                  dtype: torch.dtype, name: str) -> Any:
    """sum, mean, amax, amin, var, std, var_mean, logsumexp, max and min (values only) over
    one dim or several adjacent ones (merged into one: `_merge_dims`); over dims that are not
    adjacent, PyTorch's op."""

    def node(op: str, a: list[Any], **kw: Any) -> Node:
        return b.add(Node(name, op, a, kw, shape, sym, dtype, origin=name))

    def x0() -> Node:
        return args[0]

    x = x0()
    if packet in ("max", "min") and overload != "default" and overload != "dim":
        return _fallback(b, fx, args, kwargs, shape, sym, dtype)
    if overload == "default" and packet in ("sum", "mean", "max", "min"):
        dims, keep = list(range(x.rank)), False
    else:
        dims = kwargs.get("dim", args[1] if len(args) > 1 else None)
        if dims is None:
            dims = list(range(x.rank))
        dims = [dims] if isinstance(dims, int) else list(dims)
        if not dims:
            dims = list(range(x.rank))
        keep = kwargs.get("keepdim", args[2] if len(args) > 2 and isinstance(args[2], bool) else False)
        if packet in ("var", "std", "var_mean"):
            keep = kwargs.get("keepdim", False)
    dims = [norm_dim(d, x.rank) for d in dims]
    if packet in ("max", "min") and overload == "dim":
        if not _only_values_used(fx):
            return _fallback(b, fx, args, kwargs, shape, sym, dtype)  # values + indices
        # `x.max(dim).values` alone is an amax/amin: the indices output is never read
        kind = "amax" if packet == "max" else "amin"
        return lower_reduction(b, kind, x, dims[0], keep, name, name, dtype), None
    merged: list[int] = []
    if len(dims) != 1 and x.rank > 0 and len([d for d in dims if x.shape[d] != 1]) > 1:
        merged = sorted(set(dims))
        if merged != list(range(merged[0], merged[-1] + 1)):
            return _fallback(b, fx, args, kwargs, shape, sym, dtype)
        if packet in ("sum", "mean", "amax", "amin") and _split_pays(x, merged):
            return _two_stage(b, packet, x, merged, keep, name, dtype)
        # adjacent dims (a global average pool's H, W): one dim of a flatten of x
        x = _merge_dims(b, x, merged, name)
        dims = [merged[0]]
    if x.rank == 0:
        return node("identity", [x])
    d = next((d for d in dims if x.shape[d] != 1), dims[0])
    squeeze_rest = [e for e in dims if e != d]
    if packet in ("max", "min"):
        packet = "amax" if packet == "max" else "amin"
    if packet == "sum":
        out = lower_reduction(b, "sum", x, d, keep, name, name, dtype)
    elif packet == "amax" or packet == "amin":
        out = lower_reduction(b, packet, x, d, keep, name, name, dtype)
    elif packet == "mean":
        out = lower_mean(b, x, d, keep, name, name, dtype)
    elif packet == "logsumexp":
        out = lower_logsumexp(b, x, d, keep, name, name)
    else:
        corr = kwargs.get("correction", 1)
        corr = 1 if corr is None else corr
        var, mean = lower_var(b, x, d, keep, float(corr), name if packet != "std" else f"{name}_var", name)
        if packet == "std":
            out = b.op(name, "sqrt", [var], var, origin=name)
        elif packet == "var_mean":
            if merged and keep:
                return (_unmerge_kept(b, var, merged), _unmerge_kept(b, mean, merged))
            return (_squeeze(b, var, squeeze_rest, keep), _squeeze(b, mean, squeeze_rest, keep))
        else:
            out = var
    if merged and keep:
        return _unmerge_kept(b, out, merged)
    return _squeeze(b, out, squeeze_rest, keep)


SPLIT_MAX_ROWS = 256
"""A reduction over several dims that leaves at most this many output elements (rows) ..."""
SPLIT_MIN_OUTER = 32
"""... and whose dims before its last reduced one hold at least this many elements is
reduced in two stages (`_two_stage`)."""


PART_MIN_ELEMENTS = 1024
"""The first stage of a two-stage reduction reduces the trailing reduced dims whose product
first reaches this many elements (`_first_stage_dims`), one row per program."""


def _first_stage_dims(x: Node, merged: list[int]) -> list[int]:
    """The trailing dims of `merged` the first stage reduces: the last alone when it is long
    enough, else as many of the last ones as reach PART_MIN_ELEMENTS while one leading
    reduced dim stays for the second stage. A group norm's output averaged over
    (C, D, H, W) = (24, 22, 30, 30) split at W alone ran 2,027,520 rows of 30 and wrote 15,840
    partial means a batch row (0.68-0.94x eager on an H200, 2026-12-02); split at (D, H, W)
    it is 24 rows of 19,800 a batch row."""
    k = len(merged) - 1
    while k > 1 and math.prod(x.shape[d] for d in merged[k:]) < PART_MIN_ELEMENTS:
        k -= 1
    return merged[k:]


def _split_pays(x: Node, merged: list[int]) -> bool:
    rows = math.prod(s for i, s in enumerate(x.shape) if i not in merged)
    outer = math.prod(x.shape[d] for d in merged[:-1])
    return rows <= SPLIT_MAX_ROWS and outer >= SPLIT_MIN_OUTER and x.shape[merged[-1]] > 1


def _two_stage(b: Builder, packet: str, x: Node, merged: list[int], keep: bool, name: str,
               dtype: torch.dtype) -> Node:
    """A reduction over the adjacent dims `merged` that leaves few rows (a loss's mean over a
    whole tensor: one row), as two reductions: over the last of those dims first, every row of
    it its own program (the GPU's width), then over the rest of them, now a short row. The
    same value up to the order of the additions (sum, mean) or exactly (amax, amin): a
    reassociation that holds for every input. One row of 2**28 elements in one program ran at
    0.02x eager on the H100 (KernelBench level-1 96, HuberLoss). Where the last dim is short,
    the first stage takes several trailing dims, flattened into one (`_first_stage_dims`)."""
    inner = _first_stage_dims(x, merged)
    reduced = merged
    if len(inner) > 1:  # the trailing dims as one: the rows of the first stage
        x = _merge_dims(b, x, inner, f"{name}_inner")
        merged = merged[:len(merged) - len(inner) + 1]
    if packet == "mean":  # a mean of equal-sized means: each stage divides by its own extent,
        # read at run time (a constructor may size the reduced dims)
        part = lower_mean(b, x, merged[-1], True, f"{name}_part", name, torch.float32)
        flat = _merge_dims(b, part, merged, f"{name}_parts")
        out = lower_mean(b, flat, merged[0], keep, name, name, dtype)
    else:
        acc = torch.float32 if packet == "sum" else x.dtype
        part = lower_reduction(b, packet, x, merged[-1], True, f"{name}_part", name, acc)
        flat = _merge_dims(b, part, merged, f"{name}_parts")
        out = lower_reduction(b, packet, flat, merged[0], keep, name, name, dtype)
    return _unmerge_kept(b, out, reduced) if keep else out


def _two_stage_var(b: Builder, x: Node, merged: list[int], name: str) -> tuple[Node, Node]:
    """(biased variance, mean) of x over the adjacent dims `merged`, keeping x's rank, in two
    stages that read x once: every part (a row along merged[-1]) gets its mean and variance
    in one pass (the row kernel keeps a Welford state per lane, merged once per row),
    then the parts, all of one size, combine exactly: the mean of their means, and the mean
    of their variances plus the variance of their means (no cancellation anywhere). Reading x
    a second time for the deviations from the whole mean made a LayerNorm over (64, 256, 256)
    move four passes where three do (0.83x torch.compile on the H100, KernelBench level-1 40)."""
    var_p, mean_p = lower_var(b, x, merged[-1], True, 0.0, f"{name}_part_var", name)
    means = _merge_dims(b, mean_p, merged, f"{name}_part_means")
    variances = _merge_dims(b, var_p, merged, f"{name}_part_vars")
    mean = lower_mean(b, means, merged[0], True, f"{name}_mean", name, torch.float32)
    within = lower_mean(b, variances, merged[0], True, f"{name}_within", name, torch.float32)
    dev = b.op(f"{name}_part_dev", "sub", [means, mean], means, dtype=torch.float32, origin=name)
    sq = b.op(f"{name}_part_sq", "mul", [dev, dev], dev, origin=name)
    between = lower_mean(b, sq, merged[0], True, f"{name}_between", name, torch.float32)
    var = b.op(f"{name}_var", "add", [within, between], within, origin=name)
    return _unmerge_kept(b, var, merged), _unmerge_kept(b, mean, merged)


SPLIT_MIN_PROGRAMS = 256
"""A group norm of at most SPLIT_MAX_ROWS (sample, group) rows takes its statistics in two
stages when the first stage has at least this many (sample, group, channel) rows."""


def _split_group_norm(b: Builder, x: Node, weight: Node | None, bias: Node | None,
                      groups: int, eps: float, name: str) -> tuple[Node, Node, Node] | None:
    """A group norm with few long (sample, group) rows, its statistics in two stages: x
    (N, C, *S) viewed as (N, groups, C / groups, prod(S)), each mean first over the spatial
    dim (a program per channel) together with its variance, then over the group's channels,
    combined as `_two_stage_var` does (x read once for both statistics). KernelBench level-1 35 (7 samples
    x 8 groups of 8 x 512 x 512) ran 56 programs of 2 M elements each: 0.37x eager, 0.07x
    torch.compile on the H200. The same statistics up to the order of the additions. None
    where one stage pays (many rows, or groups of one channel)."""
    count = groups
    if x.rank < 3:
        return None
    n, cpg, spatial = x.shape[0], x.shape[1] // count, math.prod(x.shape[2:])
    rows = n * count
    if rows > SPLIT_MAX_ROWS or rows * cpg < SPLIT_MIN_PROGRAMS or cpg < 2 or spatial < 2:
        return None
    g = b.ctor_size(groups)
    s_sym: Any = 1
    for v in x.sym[2:]:
        s_sym = s_sym * v
    x4 = b.op(f"{name}_grouped", "view", [x, [x.sym[0], g, -1, s_sym]], x,
              shape=(n, count, cpg, spatial), sym=(x.sym[0], g, x.sym[1] // g, s_sym), origin=name)
    var, mean = _two_stage_var(b, x4, [2, 3], name)
    ve = b.op(f"{name}_var_eps", "add", [var, float(eps)], var, dtype=torch.float32, origin=name)
    rstd = b.op(f"{name}_rstd", "rsqrt", [ve], ve, origin=name)
    # the output from x itself, on x's own domain (`group_norm_map`): one kernel reads x and
    # writes the output, with what follows the norm fused in
    out = group_norm_map(b, x, mean, rstd, count, g, weight, bias, name, name)
    stats, stats_sym = (n, count), (x.sym[0], g)
    mean_out = b.op(f"{name}_mean_out", "squeeze", [mean, [2, 3]], mean, shape=stats,
                    sym=stats_sym, dtype=x.dtype, origin=name)
    rstd_out = b.op(f"{name}_rstd_out", "squeeze", [rstd, [2, 3]], rstd, shape=stats,
                    sym=stats_sym, dtype=x.dtype, origin=name)
    return out, mean_out, rstd_out


def _lower_vector_norm(b: Builder, fx: torch.fx.Node, args: list[Any], kwargs: dict[str, Any],
                       shape: tuple[int, ...], sym: tuple[Any, ...], dtype: torch.dtype,
                       name: str) -> Node:
    """`linalg_vector_norm` of order 2 (sqrt of a sum of squares), 1 (a sum of magnitudes) or
    +-inf (the largest or smallest magnitude) as a pointwise map and a reduction, so a norm and
    what divides by it fuse (KernelBench level-1 37, 39); other orders stay in PyTorch."""
    x = args[0]
    order = kwargs.get("ord", args[1] if len(args) > 1 else 2)
    dims = kwargs.get("dim", args[2] if len(args) > 2 else None)
    keep = bool(kwargs.get("keepdim", args[3] if len(args) > 3 else False))
    if order not in (1, 2, math.inf, -math.inf) or kwargs.get("dtype") is not None or \
            not x.dtype.is_floating_point or x.rank == 0:
        return _fallback(b, fx, args, kwargs, shape, sym, dtype)
    dims = list(range(x.rank)) if dims is None or dims == [] else \
        [dims] if isinstance(dims, int) else list(dims)
    dims = sorted({norm_dim(d, x.rank) for d in dims})
    if dims != list(range(dims[0], dims[-1] + 1)):
        return _fallback(b, fx, args, kwargs, shape, sym, dtype)
    mag = b.op(f"{name}_abs", "abs", [x], x, dtype=torch.float32, origin=name)
    if order == 2:
        mag = b.op(f"{name}_square", "mul", [mag, mag], mag, origin=name)
    kind = {1: "sum", 2: "sum", math.inf: "amax", -math.inf: "amin"}[order]
    red = _lower_reduce(b, fx, kind, "dim_IntList", [mag, dims, keep], {}, shape, sym,
                        torch.float32, f"{name}_{kind}")
    return b.op(name, "sqrt" if order == 2 else "identity", [red], red, dtype=dtype, origin=name)


def _layer_norm_over_dims(b: Builder, x: Node, count: int, weight: Node | None,
                          bias: Node | None, eps: float, name: str) -> tuple[Node, Node, Node]:
    """A layer norm over the last `count` dims (`nn.LayerNorm((C, H, W))`), its weight and
    bias broadcast as they are."""
    return _normalize_over(b, x, list(range(x.rank - count, x.rank)), weight, bias, eps, name)


def _normalize_over(b: Builder, x: Node, dims: list[int], weight: Node | None,
                    bias: Node | None, eps: float, name: str) -> tuple[Node, Node, Node]:
    """(x - mean) * rsqrt(var + eps) * weight + bias with the biased statistics over the
    adjacent `dims`: those dims merged into one (a flatten, which names no size), the mean and
    variance given back a 1 for each of them (unsqueeze), the map applied to x itself with the
    weight and bias broadcast. No view names a size, so the candidate follows a constructor
    that sizes the norm. Returns (out, mean, rstd), the statistics keeping x's rank."""
    if len(dims) > 1 and _split_pays(x, dims):
        # few long rows (a LayerNorm over (64, 256, 256) of 16 samples: 16 programs of 4M
        # elements ran at 0.03x torch.compile on the H200): the statistics in two stages
        var, mean = _two_stage_var(b, x, dims, name)
    else:
        rows = _merge_dims(b, x, dims, f"{name}_rows") if len(dims) > 1 else x
        var, mean = lower_var(b, rows, dims[0], True, 0.0, f"{name}_var", name)
        if len(dims) > 1:
            var, mean = _unmerge_kept(b, var, dims), _unmerge_kept(b, mean, dims)
    return normalize(b, x, mean, var, weight, bias, eps, name, name)


def _lower_batch_stats_norm(b: Builder, fx: torch.fx.Node, args: list[Any], kwargs: dict[str, Any],
                            shape: tuple[int, ...], sym: tuple[Any, ...], dtype: torch.dtype,
                            name: str) -> Any:
    """A batch norm that normalises with the batch's own statistics and keeps none
    (`_native_batch_norm_legit.no_stats`: what `F.instance_norm` runs on an (1, N*C, *S) view
    of x): statistics per channel (dim 1) over every other dim, when those dims are adjacent
    once dims of a fixed size 1 are left out (instance norm's leading 1), and only the output
    is read; otherwise PyTorch's op."""
    x, weight, bias = args[0], args[1], args[2]
    eps = float(args[5] if len(args) > 5 else kwargs.get("eps", 1e-5))
    dims = [d for d in range(x.rank) if d != 1 and x.sym[d] != 1]
    if x.rank < 3 or not dims or dims != list(range(dims[0], dims[-1] + 1)) or \
            not _only_values_used(fx):
        return _fallback(b, fx, args, kwargs, shape, sym, dtype)
    tail = (1,) * (x.rank - 2)

    def per_channel(v: Node | None, what: str) -> Node | None:
        if v is None:
            return None
        return b.op(f"{name}_{what}_c", "view", [v, [-1, *tail]], v, shape=(v.shape[0], *tail),
                    sym=(v.sym[0], *tail), origin=name)

    src = _instance_source(x)
    if src is not None:
        # F.instance_norm's (1, N*C, *S) view of an (N, C, *S) value: the same statistics per
        # (sample, channel) over S, taken on the value itself, so that the kernels on either
        # side of the norm (a convolution's epilogue, a reduction over channels after the view
        # back) share its domain; a weight repeated per sample is viewed as (N, C, 1, ...)
        def per_sample_channel(v: Node | None, what: str) -> Node | None:
            if v is None:
                return None
            return b.op(f"{name}_{what}_nc", "view", [v, [src.sym[0], -1, *tail]], v,
                        shape=(*src.shape[:2], *tail), sym=(*src.sym[:2], *tail), origin=name)

        out, _, _ = _normalize_over(b, src, list(range(2, src.rank)),
                                    per_sample_channel(weight, "weight"),
                                    per_sample_channel(bias, "bias"), eps, name)
        return b.op(f"{name}_merged_view", "view", [out, [1, -1, *x.sym[2:]]], out, shape=x.shape,
                    sym=x.sym, dtype=dtype, origin=name), None, None
    out, _, _ = _normalize_over(b, x, dims, per_channel(weight, "weight"),
                                per_channel(bias, "bias"), eps, name)
    return out, None, None


def _instance_source(x: Node) -> Node | None:
    """The (N, C, *S) value that `x`, a (1, N * C, *S) view, views (instance norm's layout);
    None for anything else."""
    src = x.args[0] if x.op == "view" and x.args else None
    if not isinstance(src, Node) or src.rank != x.rank or x.rank < 3 or x.shape[0] != 1 or \
            src.shape[0] * src.shape[1] != x.shape[1] or src.shape[2:] != x.shape[2:] or \
            tuple(src.sym[2:]) != tuple(x.sym[2:]):
        return None
    return src


def _lower_eval_batch_norm(b: Builder, args: list[Any], name: str) -> tuple[Node, None, None]:
    """Eval-mode BatchNorm is a per-channel affine map with the running statistics:
    (x - mean) * rsqrt(var + eps) * weight + bias, channels on dim 1. Pointwise, so it fuses
    into the convolution's epilogue kernel (the saved mean/rstd outputs are empty in eval)."""
    x, weight, bias, mean, var, _momentum, eps = args[:7]
    tail = (1,) * (x.rank - 2)

    def per_channel(v: Node, what: str) -> Node:
        return b.op(f"{name}_{what}_c", "view", [v, [-1, *tail]], v, shape=(v.shape[0], *tail),
                    sym=(v.sym[0], *tail), origin=name)

    m = per_channel(mean, "mean")
    ve = b.op(f"{name}_var_eps", "add", [per_channel(var, "var"), float(eps)], m,
              dtype=torch.float32, origin=name)
    rstd = b.op(f"{name}_rstd", "rsqrt", [ve], ve, origin=name)
    y = b.op(f"{name}_centered", "sub", [x, m], x, dtype=torch.float32, origin=name)
    y = b.op(f"{name}_normed", "mul", [y, rstd], y, origin=name)
    if weight is not None:
        y = b.op(f"{name}_scaled", "mul", [y, per_channel(weight, "weight")], y, origin=name)
    if bias is not None:
        y = b.op(f"{name}_shifted", "add", [y, per_channel(bias, "bias")], y, origin=name)
    out = b.op(name, "identity", [y], y, dtype=x.dtype, origin=name)
    b.library_calls[out] = LibraryCall("batch_norm", (x, mean, var, weight, bias),
                                       (("eps", float(eps)),))
    return out, None, None


def _merge_dims(b: Builder, x: Node, dims: list[int], name: str) -> Node:
    """x with the adjacent `dims` flattened into one (their product), at `dims[0]`: a reduction
    over several adjacent dims is a reduction over that one. `flatten` names no size, so the
    generated code follows every input set (a channel count from the constructor included)."""
    d0, d1 = dims[0], dims[-1]
    size = math.prod(x.shape[d0:d1 + 1])
    size_sym: Any = 1
    for s in x.sym[d0:d1 + 1]:
        size_sym = size_sym * s
    return b.op(f"{name}_merged", "flatten", [x, d0, d1], x,
                shape=(*x.shape[:d0], size, *x.shape[d1 + 1:]),
                sym=(*x.sym[:d0], size_sym, *x.sym[d1 + 1:]), origin=name)


def _unmerge_kept(b: Builder, out: Node, dims: list[int]) -> Node:
    """A keepdim reduction over the merged `dims`, back at its input's rank (1 at each)."""
    d0 = dims[0]
    for i in range(len(dims) - 1):
        out = b.op(f"{out.name}_kept{i}", "unsqueeze", [out, d0], out,
                   shape=(*out.shape[:d0], 1, *out.shape[d0:]),
                   sym=(*out.sym[:d0], 1, *out.sym[d0:]), origin=out.origin)
    return out


def _squeeze(b: Builder, out: Node, dims: list[int], keep: bool) -> Node:
    """Remove the other (size-1) reduced dims of a multi-dim reduction."""
    if not dims or keep:
        return out
    d0 = out.rank + len(dims)
    # out already lost one dim; the remaining size-1 dims are those in `dims` (shifted).
    keepd = [i for i in range(out.rank) if out.shape[i] == 1][: len(dims)]
    shape = tuple(s for i, s in enumerate(out.shape) if i not in keepd)
    sym = tuple(s for i, s in enumerate(out.sym) if i not in keepd)
    del d0
    return b.op(f"{out.name}_sq", "squeeze", [out, keepd], out, shape=shape, sym=sym)


_POOLS = {"max_pool1d_with_indices": 1, "max_pool2d_with_indices": 2,
          "max_pool3d_with_indices": 3, "max_pool1d": 1, "max_pool2d": 2, "max_pool3d": 3,
          "avg_pool1d": 1, "avg_pool2d": 2, "avg_pool3d": 3}
"""Pooling ops (core ATen) and their number of pooled dims."""


@dataclass(frozen=True)
class _Pooling:
    """A pooling's parameters, one entry per pooled dim."""

    window: list[int]
    stride: list[int]
    padding: list[int]
    dilation: list[int]
    count_include_pad: bool
    ceil: bool = False
    """Ceil mode: a last, partial window (max pooling only)."""

    @property
    def tiles(self) -> bool:
        """Windows that tile the input: stride equal to the window, no padding or dilation."""
        return self.stride == self.window and not any(self.padding) and \
            self.dilation == [1] * len(self.window) and not self.ceil


def _pooling(packet: str, x: Node, args: list[Any], kwargs: dict[str, Any]) -> _Pooling | None:
    """The parameters of a max or average pooling kernels can be generated for (floor mode, or
    ceil mode for a max; no divisor override, at most MAX_POOL_TAPS taps; an average whose padding is not counted is
    not generated), else None: the pooling stays in PyTorch."""
    dims = _POOLS[packet]
    names = (["kernel_size", "stride", "padding", "dilation", "ceil_mode"] if packet.startswith("max")
             else ["kernel_size", "stride", "padding", "ceil_mode", "count_include_pad",
                   "divisor_override"])
    given = dict(zip(names, args[1:], strict=False))
    given.update({k: v for k, v in kwargs.items() if k in names})

    def per_dim(v: Any, default: int) -> list[int] | None:
        v = default if v is None or (isinstance(v, (list, tuple)) and not v) else v
        v = [v] * dims if isinstance(v, int) else list(v)
        v = v * dims if len(v) == 1 else v
        return v if len(v) == dims and all(isinstance(e, int) for e in v) else None

    window = per_dim(given.get("kernel_size"), 1)
    if window is None or x.rank < dims + 1 or any(k < 1 for k in window) or \
            math.prod(window) > MAX_POOL_TAPS:
        return None
    stride = per_dim(given.get("stride"), 0)
    padding = per_dim(given.get("padding"), 0)
    dilation = per_dim(given.get("dilation"), 1)
    ceil = bool(given.get("ceil_mode", False))
    if stride is None or padding is None or dilation is None or given.get("divisor_override") is not None \
            or (ceil and not packet.startswith("max")):
        return None  # an average's partial window divides by its clipped extent: not generated
    stride = [s or k for s, k in zip(stride, window, strict=False)]
    include_pad = bool(given.get("count_include_pad", True))
    if not packet.startswith("max") and any(padding) and not include_pad:
        return None
    first = x.rank - dims
    for i in range(dims):  # every window must hold an element of x (PyTorch refuses otherwise)
        span = dilation[i] * (window[i] - 1) + 1
        if x.shape[first + i] + 2 * padding[i] < span or padding[i] * 2 > window[i]:
            return None
    return _Pooling(window, stride, padding, dilation, include_pad, ceil)


def _only_values_used(fx: torch.fx.Node) -> bool:
    """True when every user of a (values, indices) reduction reads element 0 (the values)."""
    return all(u.target is operator.getitem and u.args[1] == 0 for u in fx.users)


def _lower_take(b: Builder, packet: str, args: list[Any], shape: tuple[int, ...],
                sym: tuple[Any, ...], dtype: torch.dtype, name: str) -> Node | None:
    """An embedding, `index_select` or `x[..., idx, ...]` with index tensors on adjacent dims as
    a `take` (graph.TAKE); None for what it cannot express (a boolean mask, index tensors on
    dims apart, an output of another shape), which stays in PyTorch."""
    if packet == "embedding":
        x, idxs, d = args[0], [args[1]], 0
    elif packet == "index_select":
        x, idxs = args[0], [args[2]]
        d = norm_dim(args[1], x.rank) if isinstance(x, Node) else 0
    else:
        x, spec = args[0], list(args[1]) if isinstance(args[1], (list, tuple)) else []
        at = [j for j, v in enumerate(spec) if v is not None]
        if not at or at != list(range(at[0], at[-1] + 1)):
            return None
        idxs, d = [spec[j] for j in at], at[0]
    if not isinstance(x, Node) or not all(isinstance(i, Node) and not i.dtype.is_floating_point
                                         and i.dtype != torch.bool for i in idxs):
        return None
    k = len(idxs)
    if packet == "index_select" and idxs[0].rank != 1 or d + k > x.rank:
        return None
    rb = max(i.rank for i in idxs)
    if len(shape) != x.rank - k + rb or tuple(shape[:d]) != x.shape[:d] or \
            tuple(shape[d + rb:]) != x.shape[d + k:]:
        return None
    # sizes read off the operands at run time (a channel count the constructor sets included)
    sizes = [b.runtime_size(x, j) for j in range(d)]
    for u in range(rb):  # a broadcast dim: the first index tensor that is full along it
        src = next(((t, j) for t in idxs if (j := t.rank - rb + u) >= 0 and t.shape[j] != 1), None)
        sizes.append(b.runtime_size(*src) if src is not None else 1)
    sizes += [b.runtime_size(x, j) for j in range(d + k, x.rank)]
    composed = _compose_takes(b, x, idxs, d, shape, tuple(sizes), dtype, name)
    if composed is not None:
        return composed
    return b.add(Node(name, TAKE, [x, *idxs], {"dim": d}, shape, tuple(sizes), dtype, origin=name))


def _separable_dims(t: Node) -> tuple[int, int, list[Node]] | None:
    """(first dim, count, index tensors) of a take that keeps x's rank and whose every index
    tensor varies along its own dim only (`x[:, i]`, `x[:, i[:, None], j[None, :]]`): the
    takes a roll or a reflection pad exports to, one per dim."""
    if t.op != TAKE or t.kwargs.get("gather"):
        return None
    x, idxs, d = t.args[0], list(t.args[1:]), t.kwargs["dim"]
    k = len(idxs)
    if t.rank != x.rank:
        return None
    for q, i in enumerate(idxs):
        off = k - i.rank
        if off < 0 or any(i.shape[u] != 1 for u in range(i.rank) if off + u != q):
            return None
    return d, k, idxs


def _compose_takes(b: Builder, x: Node, idxs: list[Node], d: int, shape: tuple[int, ...],
                   sizes: tuple[Any, ...], dtype: torch.dtype, name: str) -> Node | None:
    """`take(take(y, I, dims a..), J, dim d)` as one take of y along the dims of both (an index
    tensor per dim, each varying along its own dim, an arange for a dim between them that
    neither moves): the second take's kernel loads y once instead of a kernel writing the
    first take's value for the second to read (`torch.roll` over two dims, a reflection pad,
    a nearest upsampling: one pass instead of two)."""
    inner = _separable_dims(x)
    if inner is None or len(idxs) != 1 or idxs[0].rank != 1:  # (then out has x's rank)
        return None
    a, k, inner_idxs = inner
    if a <= d < a + k:
        return None  # the same dim taken twice: an index of an index, not built
    y = x.args[0]
    lo, hi = min(a, d), max(a + k - 1, d)
    span = hi - lo + 1

    def placed(t: Node, at: int, tag: str) -> Node:
        """Index tensor t (one non-1 dim) as a rank-`span` tensor varying along `at` only."""
        full = next((u for u in range(t.rank) if t.shape[u] != 1), None)
        v = t
        if t.rank > 1:
            drop = [u for u in range(t.rank) if u != full] if full is not None else list(range(1, t.rank))
            one = (t.shape[full],) if full is not None else (1,)
            osym = (t.sym[full],) if full is not None else (1,)
            v = b.add(Node(f"{name}_{tag}_sq", "squeeze", [t, drop], {}, one, osym, t.dtype,
                           origin=name))
        for u in range(span - 1):
            pos = 0 if u < at else 1
            shp = v.shape[:pos] + (1,) + v.shape[pos:] if pos == 0 else v.shape + (1,)
            sy = v.sym[:pos] + (1,) + v.sym[pos:] if pos == 0 else v.sym + (1,)
            v = b.add(Node(f"{name}_{tag}_u{u}", "unsqueeze", [v, 0 if pos == 0 else v.rank], {},
                           shp, sy, t.dtype, origin=name))
        return v

    parts: list[Node] = []
    for j in range(lo, hi + 1):
        if j == d:
            parts.append(placed(idxs[0], j - lo, "o"))
        elif a <= j < a + k:
            parts.append(placed(inner_idxs[j - a], j - lo, f"i{j - a}"))
        else:  # a dim between the two that neither take moves: read in place
            n = b.runtime_size(y, j)
            r = b.add(Node(f"{name}_r{j}", "arange", [0, 1], {}, (y.shape[j],), (n,), torch.int64,
                           origin=name))
            parts.append(placed(r, j - lo, f"r{j}"))
    return b.add(Node(name, TAKE, [y, *parts], {"dim": lo}, shape, sizes, dtype, origin=name))


def _untyped(fx: torch.fx.Node) -> bool:
    """Whether the call makes or reads a tensor of a dtype no kernel computes in (complex)."""
    vals = [_val(fx), *(_val(a) for a in fx.all_input_nodes)]
    flat = [t for v in vals for t in (v if isinstance(v, (list, tuple)) else [v])]
    return any(isinstance(t, torch.Tensor) and t.dtype.is_complex for t in flat)


def _fallback(b: Builder, fx: torch.fx.Node, args: list[Any], kwargs: dict[str, Any],
              shape: tuple[int, ...], sym: tuple[Any, ...], dtype: torch.dtype) -> Node:
    n = b.add(Node(fx.name, "fallback", args, kwargs, shape, sym, dtype,
                   target=aten_target(fx.target), origin=fx.name))
    n.multi = isinstance(_val(fx), (list, tuple))
    return n
