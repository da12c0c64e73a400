"""What one verification draws and varies: input sets, weights, call conditions (parent side).

Every value here comes from seeds drawn with `secrets` in the parent and never sent anywhere;
the workers get tensors, not seeds. Besides the manifest's own input sets (`main` or `smoke`,
then every `shapes` entry: the *declared* sets), a verification adds sets the manifest does
not declare, each run only where the baseline accepts it (probed on the `meta` device, or on
the CPU when meta cannot run the model):

- `x-lead`: the first set's trailing sizes with another leading size (a row count no input
  set declares, 2 to 9), drawn a random number of times (2 to 4) on the *same* model instance
  the first set then uses, so the first set's calls are not an instance's first ones; then
  one element of each input changed in place (`partial`, made on the first declared set
  too), then a second fresh state_dict loaded into the
  same instance (`reload`, for `depends_on_weights`).
- `x-rows` (CPU only): the *main* set's trailing sizes (its widest rows, which the CPU never
  runs otherwise) with 1 to 3 rows, when the inputs and the model fit `CPU_ELEMENT_BUDGET`.
- `x-strided`: the first set's trailing sizes as non-contiguous views: every row of a larger
  storage taken with a step of 2 and its last dim sliced from a padded one (row stride !=
  width, inner stride 1).
- `x-hard`: the first set's trailing sizes with values that reach the numerically hard
  regions: every floating-point input scaled to a spread of `HARD_MAGNITUDE` (logits ~800 at
  4 sigma), then negative magnitudes at mixed scales (each row its own scale, 1e-3 to 1 of
  that spread).

`x-lead`, `x-strided` and `x-hard` hold at most `EXTRA_ELEMENT_BUDGET` input elements, or as
many as the first set where that is more (their rows drawn below what fits; at least 2).

Weights: per set of constructor arguments, two fresh state_dicts (`verification.weights`);
the sets that share an instance load them alternately, so every set starts with a weight
change on an instance that has run before.

Call conditions (first declared set): a few draws run with grad enabled, without any dispatch
mode active, or as torch.compile would run them (`verification.conditions`); the first set
has 3 or 4 draws. Every call goes through the timer's call path.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass, field
from typing import Any

import torch

from kopt.harness.case import Case, ResolvedInputSet, ScalarSpec, TensorSpec
from kopt.harness.data import TORCH_DTYPES, draw_tensor, instantiate, model_class
from kopt.harness.verification.tensors import input_keys
from kopt.harness.verification.weights import WeightPair, draw_pair, parameter_count

EXTRA_KINDS = {"x-lead": "general_inputs", "x-rows": "general_inputs",
               "x-strided": "general_inputs", "x-hard": "hard_values"}
"""Extra input set -> the check that judges it."""
CPU_ELEMENT_BUDGET = 1 << 22
"""Most elements (inputs + weights) an extra set may have on the CPU interpreter."""
TINY_ELEMENTS = 1 << 16
"""A set this small (inputs + weights) is tried on the CPU before the `meta` device."""
HARD_MAGNITUDE = 200.0
"""Spread (std, or half-range) floating-point inputs are scaled to in `x-hard`'s first draw:
a softmax without its max subtraction overflows float32 above ~88."""
STRIDE_STEP, STRIDE_PAD = 2, 3
"""`x-strided`: rows taken with this step; last dim sliced from one this much wider."""
EXTRA_ELEMENT_BUDGET = 1 << 24
"""Input elements (x-strided's padding aside) an extra set of `x-lead`, `x-strided` or `x-hard` may
hold, or as many as the first set holds where that is more: their row count is drawn below
what fits, a strided set over it takes every row (its last dim still sliced from a wider one)
and `x-lead` runs 2 draws. Extra sets test other leading sizes, strides and values, not
scale, and every draw is staged on disk, sent through the worker's link and judged on the
CPU. 2026-11-27, H200: a KernelBench average pooling whose main set the suite had cut to one
row of 134 M elements drew its extras at 2-9 rows (up to 10 rows of storage strided) and its
verification ran out of its 245 s; alone, with nothing beside it, it took 4 minutes."""


@dataclass
class SetPlan:
    """One input set as the workers run it (declared or extra)."""

    name: str
    kind: str
    """`declared`, or the extra set's name."""
    resolved: ResolvedInputSet
    draws: list[str]
    weights: str
    """Staged file (`inputs/<name>.safetensors`) of the state_dict loaded before its draws."""
    instance: int
    """Sets with the same number share one model instance (same constructor arguments)."""
    inplace: str | None = None
    partial: str | None = None
    """Group whose values (one element of each input changed) are written into the last
    draw's storage."""
    reload: str | None = None
    """Group: the first draw's inputs again, after `reload_weights` is loaded into the instance."""
    reload_weights: str | None = None
    poison_b: bool = False
    views: dict[str, dict[str, int]] = field(default_factory=dict)
    conditions: dict[str, dict[str, bool]] = field(default_factory=dict)
    note: str = ""
    trimmed: str = ""
    """A declared set run with fewer rows than it declares (the CPU interpreter's budget):
    what it was cut from, in words. Its spec then travels to the workers like an extra set's."""

    def groups(self) -> list[str]:
        return self.draws + [g for g in (self.inplace, self.partial) if g]


@dataclass
class Plan:
    """What one verification runs: input sets, groups of staged tensors, fresh values."""

    sets: list[str]
    """The declared input sets (what `correct`, `finite`, ... judge)."""
    draws: dict[str, list[str]]
    """Input set -> the groups of its fresh draws (`<set>-d0`, ...)."""
    inplace: dict[str, str]
    """Input set -> the group whose values are written into the last draw's storage."""
    tensors: dict[str, dict[str, torch.Tensor]]
    """Group or weights file -> staged tensors."""
    constant_inputs: dict[str, bool]
    """Input set -> True when its inputs cannot change between draws (zeros/ones only)."""
    items: list[SetPlan] = field(default_factory=list)
    """Every set in the order the candidate's worker runs them (declared and extra)."""
    weights_of: dict[str, str] = field(default_factory=dict)
    """Input set -> the weights file its draws use."""
    labels: dict[str, str] = field(default_factory=dict)
    """Group -> how it was called, for failure texts: ' (call 7 of a reused instance, ...)'."""
    skipped: dict[str, str] = field(default_factory=dict)
    """Extra set -> why it was not run."""
    perturbed: list[str] = field(default_factory=list)

    def item(self, name: str) -> SetPlan | None:
        return next((i for i in self.items if i.name == name), None)

    def extra(self, check: str) -> list[SetPlan]:
        return [i for i in self.items if EXTRA_KINDS.get(i.kind) == check]


# -- input specs ---------------------------------------------------------------------------------

def _tensor_specs(resolved: ResolvedInputSet) -> dict[str, TensorSpec]:
    return {k: s for k, s in input_keys(resolved).items() if isinstance(s, TensorSpec)}


def leading_size(resolved: ResolvedInputSet) -> int | None:
    specs = [s for s in _tensor_specs(resolved).values() if s.shape]
    return specs[0].shape[0] if specs else None


def with_leading(resolved: ResolvedInputSet, rows: int, name: str,
                 like: ResolvedInputSet | None = None) -> ResolvedInputSet:
    """`resolved`'s inputs (or `like`'s trailing sizes) with `rows` in place of the leading
    size of every tensor that shares the first tensor's leading size."""
    src = like or resolved
    lead = leading_size(src)

    def change(spec: TensorSpec | ScalarSpec) -> TensorSpec | ScalarSpec:
        if isinstance(spec, ScalarSpec) or not spec.shape or spec.shape[0] != lead:
            return spec
        return spec.model_copy(update={"shape": [rows] + list(spec.shape[1:])})

    return ResolvedInputSet(name, [change(a) for a in src.args],
                            {k: change(v) for k, v in src.kwargs.items()},
                            dict(src.init_kwargs), list(src.init_args))


def _elements(resolved: ResolvedInputSet) -> int:
    total = 0
    for s in _tensor_specs(resolved).values():
        n = 1
        for d in s.shape:
            n *= d
        total += n
    return total


def base_shape(spec: TensorSpec, view: dict[str, int] | None) -> list[int]:
    """The staged storage's shape: the spec's, widened for a strided view."""
    shape = list(spec.shape)
    if not spec.contiguous and len(shape) >= 2:
        shape[-1], shape[-2] = shape[-2], shape[-1]
    if view and shape:
        shape[0] *= view.get("step0", 1)
        if len(shape) >= 2:
            shape[-1] += view.get("pad", 0)
    return shape


def view_of(base: torch.Tensor, view: dict[str, int] | None, spec: TensorSpec) -> torch.Tensor:
    """The argument a forward gets from its staged storage."""
    t = base
    if view and t.dim() >= 1:
        index: list[slice] = [slice(None)] * t.dim()
        index[0] = slice(0, spec.shape[0] * view.get("step0", 1), view.get("step0", 1))
        if t.dim() >= 2:
            index[-1] = slice(0, t.shape[-1] - view.get("pad", 0))
        t = t[tuple(index)]
    if not spec.contiguous and t.dim() >= 2:
        t = t.transpose(-1, -2)
    return t


def draw_group(resolved: ResolvedInputSet, views: dict[str, dict[str, int]]) -> dict[str, torch.Tensor]:
    """Fresh staged tensors for every tensor input, from secret seeds."""
    out = {}
    for k, s in _tensor_specs(resolved).items():
        shape = base_shape(s, views.get(k))
        if not s.contiguous and len(shape) >= 2:  # draw_tensor swaps them back itself
            shape[-1], shape[-2] = shape[-2], shape[-1]
        out[k] = draw_tensor(s.model_copy(update={"shape": shape}), secrets.randbits(62))
    return out


# -- worker side: requests back into input sets --------------------------------------------------

def spec_to_json(resolved: ResolvedInputSet) -> dict[str, Any]:
    def one(s: TensorSpec | ScalarSpec) -> dict[str, Any]:
        return {"tensor": s.model_dump()} if isinstance(s, TensorSpec) else {"scalar": s.value}

    return {"args": [one(a) for a in resolved.args],
            "kwargs": {k: one(v) for k, v in resolved.kwargs.items()},
            "init_kwargs": resolved.init_kwargs, "init_args": resolved.init_args}


def _spec_from_json(d: dict[str, Any]) -> TensorSpec | ScalarSpec:
    return TensorSpec(**d["tensor"]) if "tensor" in d else ScalarSpec(value=d["scalar"])


def resolve(case: Case, item: dict[str, Any]) -> ResolvedInputSet:
    """The input set a request item names: a declared one, or the spec the parent sent."""
    spec = item.get("spec")
    if not spec:
        return case.input_set(item["name"])
    return ResolvedInputSet(item["name"], [_spec_from_json(a) for a in spec["args"]],
                            {k: _spec_from_json(v) for k, v in spec["kwargs"].items()},
                            dict(spec["init_kwargs"]), list(spec["init_args"]))


def materialize(resolved: ResolvedInputSet, bases: dict[str, torch.Tensor], device: str,
                views: dict[str, dict[str, int]] | None = None) -> Any:
    """Forward arguments from staged storages (views applied; `bases` is not copied)."""
    from kopt.harness.data import Inputs

    def value(key: str, spec: TensorSpec | ScalarSpec) -> Any:
        if isinstance(spec, ScalarSpec):
            return spec.value
        return view_of(bases[key], (views or {}).get(key), spec)

    args = [value(f"arg{i}", a) for i, a in enumerate(resolved.args)]
    kwargs = {k: value(f"kw_{k}", v) for k, v in resolved.kwargs.items()}
    return Inputs(args, kwargs)


# -- does the baseline accept a set? -------------------------------------------------------------

def baseline_accepts(case: Case, resolved: ResolvedInputSet,
                     views: dict[str, dict[str, int]] | None = None) -> str | None:
    """None when the baseline runs on these inputs (shapes, dtypes, strides), else why not.
    Tried on the `meta` device (no values) and, when the model is small, on the CPU: first
    when it is tiny (a process's first `meta` call imports sympy and torch's meta kernels,
    0.5 s of a `kopt verify` on a 2-core CPU), else when `meta` refused."""
    cls = model_class(case)
    errors = []
    elements = _elements(resolved)
    size = None  # inputs + weights: counted (a `meta` instance) only when needed

    def small(limit: int) -> bool:
        nonlocal size
        if elements > limit:
            return False
        if size is None:
            size = elements + parameter_count(case, resolved)
        return size <= limit

    order = ("cpu", "meta") if small(TINY_ELEMENTS) else ("meta", "cpu")
    for device in order:
        if device == "cpu" and not small(CPU_ELEMENT_BUDGET):
            continue
        try:
            with torch.device(device):
                model = instantiate(cls, resolved, case.model_file)
            bases = {k: torch.zeros(base_shape(s, (views or {}).get(k)),
                                    dtype=TORCH_DTYPES[s.dtype], device=device)
                     for k, s in _tensor_specs(resolved).items()}
            inputs = materialize(resolved, bases, device, views)
            with torch.no_grad():
                model.eval()(*inputs.args, **inputs.kwargs)
            return None
        except Exception as err:  # the user's model: any failure means "not accepted"
            errors.append(f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"[:160])
    return f"the baseline does not run on it ({errors[-1] if errors else 'too large for the CPU'})"


# -- the plan ------------------------------------------------------------------------------------

def _ctor_key(resolved: ResolvedInputSet) -> str:
    return json.dumps([resolved.init_args, resolved.init_kwargs], sort_keys=True, default=str)


def _pick_rows(avoid: set[int], low: int, high: int) -> int:
    choices = [r for r in range(low, high + 1) if r not in avoid] or [high + 1]
    return choices[secrets.randbelow(len(choices))]


def _scaled(group: dict[str, torch.Tensor], resolved: ResolvedInputSet, mixed: bool) -> dict[str, torch.Tensor]:
    out = {}
    for k, s in _tensor_specs(resolved).items():
        t = group[k]
        if not t.dtype.is_floating_point or s.init not in ("normal", "uniform"):
            out[k] = t
            continue
        spread = s.std if s.init == "normal" else max(abs(s.low or 0.0), abs(s.high or 1.0))
        if not spread > 0:  # a constant input: nothing to scale
            out[k] = t
            continue
        factor = HARD_MAGNITUDE / spread
        x = t.float() * factor
        if mixed and x.dim() >= 1:
            gen = torch.Generator().manual_seed(secrets.randbits(62))
            rows = torch.pow(10.0, -3.0 * torch.rand(x.shape[0], generator=gen))
            x = -x.abs() * rows.view(-1, *([1] * (x.dim() - 1)))
        out[k] = x.to(t.dtype)
    return out


def _partial(group: dict[str, torch.Tensor], resolved: ResolvedInputSet) -> dict[str, torch.Tensor]:
    """`group` with one random element of each drawn input set to a fresh value.

    What this catches is an output cached under a key read from a sample of the input's
    elements (its first six, say): the stale output comes back unless the changed element is
    in the sample. One element is the change least likely to land there (each more one is
    another chance for the cache to see it and recompute honestly); `plan_verification` makes
    the update on two sets, so such a cache escapes both only when both changes land in its
    sample (a 6-element key on two 256-element sets: 1 in 1800; with 1-3 changes on one set,
    as before 2026-11-28, about 1 in 20, which CI met)."""
    out = {}
    fresh = draw_group(resolved, {})
    for k, t in group.items():
        spec = _tensor_specs(resolved)[k]
        t = t.clone()
        if spec.init not in ("zeros", "ones") and t.numel():
            flat, new = t.view(-1), fresh[k].reshape(-1)
            i = secrets.randbelow(flat.numel())
            j = secrets.randbelow(new.numel())
            if t.dtype == torch.bool:
                flat[i] = ~flat[i]
            elif bool(new[j] != flat[i]):
                flat[i] = new[j]
            else:
                flat[i] = _another_value(flat[i], spec, t.dtype)
        out[k] = t
    return out


def _another_value(v: torch.Tensor, spec: Any, dtype: torch.dtype) -> torch.Tensor:
    """A value other than v that the input's distribution can draw: the next one up for an
    integer input, wrapping inside [low, high) (a class index one past the last class is out
    of range for cross-entropy: `partial` once wrote 10 into targets drawn from [0, 10));
    v + 1 for a float."""
    if dtype.is_floating_point:
        return v + 1
    low = int(spec.low if spec.low is not None else 0)
    high = int(spec.high if spec.high is not None else 100)
    if high - low < 2:
        return v  # a single value: nothing else to write
    return low + (v - low + 1) % (high - low)


def plan_verification(case: Case, sets: list[str], draws: int, device: str) -> Plan:
    """Every set, group, weights file and call condition of one verification."""
    from kopt.harness.verification.conditions import assign_conditions

    plan = Plan(list(sets), {}, {}, {}, {})
    first = case.input_set(sets[0])
    lead = leading_size(first)
    declared_leads = {leading_size(case.input_set(n)) for n in case.input_set_names()}

    # extra sets: (name, resolved, views), each probed against the baseline
    extras: dict[str, tuple[ResolvedInputSet, dict[str, dict[str, int]]]] = {}
    budget = max(EXTRA_ELEMENT_BUDGET, _elements(first))
    per_row = max(1, _elements(with_leading(first, 1, "row"))) if lead is not None else 1

    def extra_rows(avoid: set[int], low: int, high: int) -> int:
        return _pick_rows(avoid, low, max(low, min(high, budget // per_row)))

    if lead is not None:
        candidates = [("x-lead", with_leading(first, extra_rows(declared_leads, 2, 9), "x-lead"), {})]
        if device == "cpu" and sets[0] != "main":
            main = case.input_set("main")
            rows = with_leading(main, 1 + secrets.randbelow(3), "x-rows")
            # the interpreter's cost follows the work: a few rows may hold no more than 4x the
            # first set's elements (a row of a conv's main input can be a whole image)
            budget = max(4 * _elements(first), 1 << 16)
            if (parameter_count(case, main) + _elements(rows) > CPU_ELEMENT_BUDGET
                    or _elements(rows) > budget):
                rows = with_leading(main, 1, "x-rows")
            if (parameter_count(case, main) + _elements(rows) > CPU_ELEMENT_BUDGET
                    or _elements(rows) > budget):
                plan.skipped["x-rows"] = (f"the main inputs' rows ({_elements(rows)} elements, "
                                          f"model {parameter_count(case, main)}) exceed the CPU "
                                          f"interpreter's budget ({budget} input elements, "
                                          f"{CPU_ELEMENT_BUDGET} in all)")
            else:
                candidates.append(("x-rows", rows, {}))
        strided = with_leading(first, extra_rows(declared_leads, 2, 5), "x-strided")
        step = STRIDE_STEP if STRIDE_STEP * _elements(strided) <= budget else 1
        candidates.append(("x-strided", strided,
                           {k: {"step0": step, "pad": STRIDE_PAD}
                            for k, s in _tensor_specs(strided).items() if s.shape and s.contiguous}))
        if any(TORCH_DTYPES[s.dtype].is_floating_point and s.init in ("normal", "uniform")
               for s in _tensor_specs(first).values()):
            candidates.append(("x-hard", with_leading(first, extra_rows(set(), 2, 5), "x-hard"), {}))
        else:
            plan.skipped["x-hard"] = "no floating-point input drawn from a distribution"
        for name, resolved, views in candidates:
            why = baseline_accepts(case, resolved, views)
            if why:
                plan.skipped[name] = why
            else:
                extras[name] = (resolved, views)
    else:
        plan.skipped.update({n: "no tensor input with a leading size" for n in EXTRA_KINDS})

    # order on the instances: x-lead shifts the first set's call count
    order: list[tuple[str, str, ResolvedInputSet, dict[str, dict[str, int]]]] = []
    if "x-lead" in extras:
        order.append(("x-lead", "x-lead", *extras["x-lead"]))
    order.append((sets[0], "declared", first, {}))
    for name in ("x-strided", "x-hard"):
        if name in extras:
            order.append((name, name, *extras[name]))
    trimmed: dict[str, str] = {}
    for n in sets[1:]:
        resolved, trimmed[n] = _within_interpreter_budget(case, n, first, device)
        order.append((n, "declared", resolved, {}))
    if "x-rows" in extras:
        order.append(("x-rows", "x-rows", *extras["x-rows"]))

    pairs: dict[str, WeightPair] = {}
    files: dict[int, str] = {}
    instances: dict[str, int] = {}
    loads: dict[int, int] = {}
    for name, kind, resolved, views in order:
        key = _ctor_key(resolved)
        source = sets[0] if kind != "x-rows" else "main"
        if kind == "declared":
            source = name
        if key not in pairs:
            pairs[key] = draw_pair(case, source)
            plan.perturbed += [k for k in pairs[key].perturbed if k not in plan.perturbed]
        # share an instance: always for the first set's extras, else by a secret coin
        reuse = key in instances and (name in ("x-lead", sets[0], "x-strided", "x-hard")
                                      or secrets.randbelow(2) == 0)
        if not reuse:
            instances[key] = len(loads)
        inst = instances[key]
        loads[inst] = loads.get(inst, 0) + 1
        pair = pairs[key]
        chosen = pair.a if loads[inst] % 2 else pair.b
        n_draws = draws
        if kind == "declared" and name == sets[0]:
            n_draws = draws + secrets.randbelow(2)
        elif kind == "x-lead":
            n_draws = 2 + (secrets.randbelow(3) if _elements(resolved) <= EXTRA_ELEMENT_BUDGET else 0)
        elif kind != "declared":
            n_draws = 1 if kind == "x-rows" else 2
        # one staged file per state_dict, however many sets load it (a model's weights can
        # be GBs at the main sizes)
        item = SetPlan(name, kind, resolved, [f"{name}-d{i}" for i in range(n_draws)],
                       weights=files.setdefault(id(chosen), f"weights-{name}"), instance=inst,
                       views=views, trimmed=trimmed.get(name, "") if kind == "declared" else "")
        plan.tensors[item.weights] = chosen
        plan.weights_of[name] = item.weights
        for g in item.draws:
            plan.tensors[g] = draw_group(resolved, views)
        if kind == "x-hard":
            plan.tensors[item.draws[0]] = _scaled(plan.tensors[item.draws[0]], resolved, False)
            plan.tensors[item.draws[1]] = _scaled(plan.tensors[item.draws[1]], resolved, True)
        if kind == "declared":
            item.inplace = f"{name}-new"
            plan.tensors[item.inplace] = draw_group(resolved, views)
            item.poison_b = name == sets[0]
            plan.draws[name] = list(item.draws)
            plan.inplace[name] = item.inplace
            plan.constant_inputs[name] = all(s.init in ("zeros", "ones")
                                             for s in _tensor_specs(resolved).values())
        plan.items.append(item)

    # partial in-place update and the weights reload: on x-lead (a few rows) when it runs
    first = plan.items[[i.name for i in plan.items].index(sets[0])]
    carrier = plan.item("x-lead") or first
    for item in [carrier] + ([first] if first is not carrier else []):  # two when x-lead runs
        last = item.inplace or item.draws[-1]
        item.partial = f"{item.name}-partial"
        plan.tensors[item.partial] = _partial(plan.tensors[last], item.resolved)
    carrier.reload = f"{carrier.name}-w2"
    plan.tensors[carrier.reload] = plan.tensors[carrier.draws[0]]
    pair = pairs[_ctor_key(carrier.resolved)]
    other = pair.b if plan.tensors[carrier.weights] is pair.a else pair.a
    carrier.reload_weights = files.setdefault(id(other), f"weights-{carrier.name}-reload")
    plan.tensors[carrier.reload_weights] = other

    assign_conditions(plan, device)
    for item in plan.items:
        extra = item.name not in plan.sets
        if extra:
            item.note = describe(item, case)
    return plan


def _within_interpreter_budget(case: Case, name: str, first: ResolvedInputSet,
                               device: str) -> tuple[ResolvedInputSet, str]:
    """A declared `shapes` set as the CPU interpreter runs it: whole when its inputs stay within
    the budget `x-rows` has (4x the first set's elements), else its trailing sizes with as many
    rows as fit (at least 2), when the baseline runs on that. The interpreter walks every
    element program by program: layernorm_gelu's 1000x4096 bf16 set took 18 s a forward, 72 s
    of a 82 s verification. The rows a set declares are a leading size like any other, and
    `x-lead` varies those; its widths are what the CPU could not see otherwise. On a GPU every
    set runs whole. Returns the set and, when it was cut, what was cut in words."""
    resolved = case.input_set(name)
    lead = leading_size(resolved)
    if device != "cpu" or not lead:
        return resolved, ""
    budget = max(4 * _elements(first), 1 << 16)
    total = _elements(resolved)
    if total <= budget:
        return resolved, ""
    rows = max(2, min(lead - 1, budget * lead // total))
    if rows >= lead:
        return resolved, ""
    trimmed = with_leading(resolved, rows, name)
    if baseline_accepts(case, trimmed):
        return resolved, ""
    return trimmed, (f"{name} ran with {rows} of its {lead} rows on the CPU interpreter "
                     f"({total} input elements over the budget of {budget}; a GPU runs all "
                     f"of them)")


def describe(item: SetPlan, case: Case) -> str:
    """What an extra set is, in words, for check details."""
    shapes = ", ".join("x".join(map(str, s.shape)) for s in _tensor_specs(item.resolved).values())
    if item.kind == "x-lead":
        return f"x-lead ({shapes}: a leading size no input set declares)"
    if item.kind == "x-rows":
        return f"x-rows ({shapes}: the main inputs' trailing sizes with few rows)"
    if item.kind == "x-strided":
        step = max((v.get("step0", 1) for v in item.views.values()), default=1)
        rows = f"rows with step {step}, " if step > 1 else ""
        return (f"x-strided ({shapes} as non-contiguous views: {rows}"
                f"last dim sliced from one {STRIDE_PAD} wider)")
    if item.kind == "x-hard":
        return f"x-hard ({shapes}: values scaled to a spread of {HARD_MAGNITUDE:g}, then negative at mixed scales)"
    return item.name


def candidate_request_sets(plan: Plan) -> list[dict[str, Any]]:
    """The `sets` of the candidate job's request, in run order."""
    out = []
    for item in plan.items:
        entry: dict[str, Any] = {"name": item.name, "draws": item.draws, "inplace": item.inplace,
                                 "partial": item.partial, "poison_b": item.poison_b,
                                 "weights": item.weights, "instance": item.instance,
                                 "conditions": item.conditions}
        if item.name not in plan.sets or item.trimmed:
            entry["spec"] = spec_to_json(item.resolved)
        if item.views:
            entry["views"] = item.views
        if item.reload:
            entry["reload"] = {"group": item.reload, "weights": item.reload_weights}
        out.append(entry)
    return out


def droppable(plan: Plan, item: SetPlan) -> bool:
    """Whether an extra set may be left out when the baseline refuses it on the device: one no
    other check rides on (no partial update, no weights reload). Its probe (`baseline_accepts`)
    ran on `meta` or the CPU, where a GPU library's own limits do not show (cuDNN's GRU refuses
    a non-contiguous hidden state that the CPU's takes)."""
    return item.name not in plan.sets and not item.partial and not item.reload


def drop_refused(plan: Plan, refused: dict[str, str], device: str) -> None:
    """Leave out the extra sets the baseline refused in the reference job (`may_refuse`), each
    with why in `plan.skipped` (the checks that judge it say so)."""
    for name, why in refused.items():
        item = plan.item(name)
        if item is None or not droppable(plan, item):
            continue
        plan.items.remove(item)
        plan.skipped[name] = f"the baseline itself refuses it on {device} ({why})"[:300]


def reference_request_sets(plan: Plan) -> list[dict[str, Any]]:
    """The `sets` of the reference job's request: every group, the reload as its own entry."""
    out = []
    for item in plan.items:
        entry: dict[str, Any] = {"name": item.name, "groups": item.groups(), "weights": item.weights}
        if item.name not in plan.sets or item.trimmed:
            entry["spec"] = spec_to_json(item.resolved)
        if item.views:
            entry["views"] = item.views
        if item.kind == "x-hard":
            entry["truth"] = True
        if droppable(plan, item):
            entry["may_refuse"] = True
        out.append(entry)
        if item.reload:
            out.append({**entry, "groups": [item.reload], "weights": item.reload_weights})
    return out
