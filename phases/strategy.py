"""The offline engineer's strategy space, walked by the optimizer one hypothesis a round.

A `Hypothesis` is a named set of engineer options: what the engineer should change to test
one idea about the last candidate, e.g. "loop long reductions in 4096-wide blocks"
(`{"kopt_config": {"reduction": {"BLOCK_SIZE": 4096}}}`) or "split at the reduction's edges"
(`{"policy": "reductions alone"}`). The options an engineer understands today:

- `policy`: a fusion policy by name (`phases.engineers.offline.engineer.POLICIES`: where
  group boundaries fall: `full fusion`, `no matmul epilogue`, `reductions alone`,
  `one kernel per op`);
- `kopt_config`: `{kernel kind: {launch parameter: value}}` set in the candidate's
  `KOPT_CONFIG` for every kernel of that kind that launches with that parameter
  (reduction strategy: one pass vs looped via BLOCK_SIZE; warps; a matmul's BACKEND:
  `cublas` = library product + fused epilogue, `triton` = a Triton template with the
  epilogue inside);
- anything else (e.g. `rewrites: False`) is passed through: an engineer that does not know
  an option ignores it, produces the same kernel, and the optimizer moves on to the next
  hypothesis.

`HYPOTHESES` is a list: other modules add theirs with `register(Hypothesis(...))`.

`pick_next(facts, tried)` reads the last iteration's profile facts (`ProfileFacts`: the
kernel with the most time above its floor, its kind, what bounds it) and returns the first
untried hypothesis aimed at that kernel's kind and bound, then any other untried one that
applies to a kernel of the candidate.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

ANY = "any"


@dataclass(frozen=True)
class Hypothesis:
    """One idea to test in a round: a name, the engineer options that test it, and what it
    is for."""

    name: str
    options: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)
    """Engineer options (see the module docstring)."""
    kinds: tuple[str, ...] = (ANY,)
    """Kernel kinds it changes (`reduction`, `pointwise`, `matmul`, `tiled`...; `any`)."""
    bound: str | None = None
    """`memory` or `compute` when it only helps a kernel bound by that; None: either."""
    why: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


HYPOTHESES: list[Hypothesis] = [
    Hypothesis("reductions looped in 4096-wide blocks",
               {"kopt_config": {"reduction": {"BLOCK_SIZE": 4096}}}, ("reduction",), "memory",
               "a row held whole in registers spills when it is long: a loop over 4096-wide "
               "blocks (online max/sum) keeps the registers for loads in flight"),
    Hypothesis("reductions in one pass, 16 warps",
               {"kopt_config": {"reduction": {"BLOCK_SIZE": 16384, "num_warps": 16}}},
               ("reduction",), "memory",
               "one HBM read per row when the row fits: more warps share the row's registers"),
    Hypothesis("reductions with 4 warps", {"kopt_config": {"reduction": {"num_warps": 4}}},
               ("reduction",), None,
               "short rows: fewer warps per row leave more programs resident per SM"),
    Hypothesis("matmul: library product + fused epilogue",
               {"kopt_config": {"matmul": {"BACKEND": "cublas"}}}, ("matmul",), "compute",
               "cuBLAS's product at its peak, the epilogue in one Triton pass over the output"),
    Hypothesis("matmul: Triton template with the epilogue inside",
               {"kopt_config": {"matmul": {"BACKEND": "triton"}}}, ("matmul",), "memory",
               "the epilogue applied in registers saves one write and one read of the output"),
    Hypothesis("split at the matmul's epilogue", {"policy": "no matmul epilogue"},
               ("matmul",), None,
               "a fused epilogue can cost the product its tile shape"),
    Hypothesis("attention with its scores in memory", {"policy": "no matmul epilogue"},
               ("attention",), None,
               "the flash-style kernel holds a query block and its output tile in registers: "
               "with wide heads in float32 the library's products and one softmax pass may win"),
    Hypothesis("split at the reductions' edges", {"policy": "reductions alone"},
               ("reduction",), None,
               "a reduction that also computes its prologue may lose its one-pass form"),
    Hypothesis("pointwise blocks of 4096", {"kopt_config": {"pointwise": {"BLOCK_SIZE": 4096}}},
               ("pointwise",), "memory",
               "longer blocks per program: fewer programs, more bytes in flight each"),
    Hypothesis("algebraic rewrites off", {"rewrites": False}, (ANY,), None,
               "a rewrite that saves FLOPs can cost a pass or precision"),
    Hypothesis("one kernel per op", {"policy": "one kernel per op"}, (ANY,), None,
               "the unfused baseline of Triton kernels: tells fusion's gain from codegen's"),
]


def register(h: Hypothesis) -> None:
    """Add a hypothesis to the space (replaces one of the same name)."""
    HYPOTHESES[:] = [x for x in HYPOTHESES if x.name != h.name] + [h]


@dataclass
class ProfileFacts:
    """What the last iteration measured, as the next round's choice (and an LLM engineer's
    prompt) reads it."""

    iteration: int | None = None
    verdict: str | None = None
    speedup: float | None = None
    pct_of_floor: float | None = None
    bound: str | None = None
    """What bounds the case (the roofline's `memory` or `compute`)."""
    kernels: list[dict[str, Any]] = field(default_factory=list)
    """The candidate's kernels: {"name", "kind", "ms" (profiled; None unprofiled), "share"}."""
    hot: dict[str, Any] | None = None
    """The kernel with the most time above its floor (the most time when no floor is known;
    the first reduction or matmul when nothing was profiled)."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def text(self) -> str:
        """Two or three lines for an engineer's prompt."""
        lines = []
        if self.iteration is not None:
            lines.append(f"Iteration {self.iteration}: {self.verdict or 'not verified'}"
                         + (f", {self.pct_of_floor:.1f}% of the roofline floor"
                            if self.pct_of_floor is not None else "")
                         + (f", {self.bound}-bound" if self.bound else "") + ".")
        if self.hot:
            lines.append(f"Hottest kernel: {self.hot['name']} ({self.hot.get('kind')})"
                         + (f", {self.hot['ms']:.4g} ms ({self.hot.get('share', 0) * 100:.0f}% "
                            "of kernel time)" if self.hot.get("ms") else "") + ".")
        return "\n".join(lines)


def facts_of(record: dict[str, Any] | None, kernels: list[dict[str, Any]],
             profile: dict[str, Any] | None, bound: str | None) -> ProfileFacts:
    """The facts of one iteration: its record (optimizer iterations.jsonl), the candidate's
    kernels ({"name", "kind"}), its profile (`harness.profiling`'s {"kernels": [{"name",
    "total_ms"}]} or None) and the case's bound."""
    timed = {str(k["name"]): float(k.get("total_ms") or 0.0)
             for k in (profile or {}).get("kernels", [])}
    total = sum(timed.get(k["name"], 0.0) for k in kernels) or 0.0
    rows = []
    for k in kernels:
        ms = next((v for n, v in timed.items() if k["name"] in n), None)
        rows.append({"name": k["name"], "kind": k.get("kind"), "ms": ms,
                     "share": (ms / total) if ms and total else None})
    hot = max(rows, key=lambda r: r["ms"] or 0.0) if any(r["ms"] for r in rows) else next(
        (r for r in rows if r["kind"] in ("reduction", "matmul")), rows[0] if rows else None)
    record = record or {}
    return ProfileFacts(iteration=record.get("iteration"), verdict=record.get("verdict"),
                        speedup=record.get("speedup"), pct_of_floor=record.get("pct_of_floor"),
                        bound=bound, kernels=rows, hot=hot)


def pick_next(facts: ProfileFacts, tried: set[str],
              space: list[Hypothesis] | None = None) -> Hypothesis | None:
    """The next hypothesis: untried, aimed at the hot kernel's kind and the bound first."""
    space = HYPOTHESES if space is None else space
    kinds = {k.get("kind") for k in facts.kernels}
    hot_kind = (facts.hot or {}).get("kind")

    def score(h: Hypothesis) -> tuple[int, int]:
        aims = 0 if hot_kind in h.kinds else 1 if (kinds & set(h.kinds)) else 2
        if ANY in h.kinds:
            aims = 2
        bound = 0 if h.bound in (None, facts.bound) or facts.bound is None else 1
        return aims, bound

    open_ = [h for h in space if h.name not in tried
             and (ANY in h.kinds or kinds & set(h.kinds) or not kinds)]
    if not open_:
        return None
    return min(open_, key=lambda h: (score(h), space.index(h)))


def apply_kopt_config(source: str, kernels: list[dict[str, Any]],
                      overrides: dict[str, dict[str, Any]]) -> tuple[str, list[str]]:
    """`source` with `KOPT_CONFIG[kernel][param] = value` for each kernel whose kind has an
    override and that launches with `param` (its `KOPT_CONFIG` entry has it, or its
    `KOPT_TUNABLES` declares the value); what was set ("kernel.param=v")."""
    from kopt.phases.source_edit import literal, replace_value

    config = literal(source, "KOPT_CONFIG")
    tunables = literal(source, "KOPT_TUNABLES") or {}
    if not isinstance(config, dict):
        return source, []
    changed = []
    for k in kernels:
        for param, value in (overrides.get(str(k.get("kind"))) or {}).items():
            declared = (tunables.get(k["name"]) or {}).get(param) or []
            entry = config.get(k["name"])
            if isinstance(entry, dict) and (value in declared or param in entry) \
                    and entry.get(param) != value:
                entry[param] = value
                changed.append(f"{k['name']}.{param}={value}")
    return (replace_value(source, "KOPT_CONFIG", config), changed) if changed else (source, [])
