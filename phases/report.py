"""The integrator's `report.md` and its chart (latency and % of floor per iteration).

Everything in the report is read from the run's manifests; timings carry their label
(`cuda-events` or `cpu-interpreter`) so an interpreter figure is never read as a GPU one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kopt.harness.speedup import NO_SPEED, format_speedup, speed_measured
from kopt.phases.manifest import Manifest


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:.4g}"


def _x(v: float | None, label: str | None = None) -> str:
    return format_speedup(v, label, missing="-")


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}%"


def write_chart(iterations: list[dict[str, Any]], baseline_ms: float | None, label: str,
                out: Path) -> Path | None:
    """PNG: latency per iteration (bars; rejected ones grey) and % of floor (line)."""
    if not iterations:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.6), dpi=110)
    xs = [f"{it['phase'][:3]} {it['iteration']}" for it in iterations]
    ys = [it.get("median_ms") or 0.0 for it in iterations]
    colors = ["#3b7dd8" if it["verdict"] == "accepted" else "#bbbbbb" for it in iterations]
    ax.bar(xs, ys, color=colors)
    if baseline_ms:
        ax.axhline(baseline_ms, color="#d84b3b", linestyle="--", linewidth=1,
                   label=f"eager {baseline_ms:.4g} ms")
        ax.legend(loc="upper left", fontsize=8)
    ax.set_ylabel(f"median ms ({label})")
    ax.set_xlabel("iteration (grey: rejected)")
    pcts = [it.get("pct_of_floor") for it in iterations]
    if any(p is not None for p in pcts):
        ax2 = ax.twinx()
        ax2.plot(xs, [p if p is not None else float("nan") for p in pcts], "o-",
                 color="#2a9d55")
        ax2.set_ylabel("% of roofline floor")
        ax2.set_ylim(0, 105)
    else:
        ax.set_title("% of floor: n/a (no GPU ceilings on this device)", fontsize=9)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    plt.close(fig)
    return out


def render(manifests: dict[str, Manifest], *, iterations: list[dict[str, Any]],
           verification: dict[str, Any],
           timing: dict[str, Any], chart: str | None, archive_hint: str | None = None,
           outcome: dict[str, Any] | None = None) -> str:
    """report.md's text."""
    arch = manifests["architect"]
    opt = manifests.get("optimizer")
    acc = manifests.get("accelerator")
    label = timing.get("timing_label", arch.timing_label or "")
    measured = speed_measured(label)
    lines = [f"# kopt run {arch.run_id}: {arch.case}", "",
             f"Branch `{arch.branch}`. Timings: **{label}**"
             + (f" (Triton interpreter on the CPU: {NO_SPEED}; the milliseconds below time "
                "the interpreter, not a kernel)." if not measured else "."), ""]
    if outcome:
        lines += [f"**Outcome: {outcome['summary']}.**", ""]
    one = "1.00x" if measured else "-"
    lines += ["## Result", "", "| variant | median ms | vs eager | vs torch.compile | % of floor |",
              "| --- | ---: | ---: | ---: | ---: |",
              f"| eager | {_ms(timing.get('eager_ms'))} | {one} | - | - |",
              f"| torch.compile | {_ms(timing.get('compile_ms'))} | "
              f"{_x(_ratio(timing.get('eager_ms'), timing.get('compile_ms')), label)} | {one} | - |",
              f"| kopt kernel | {_ms(timing.get('candidate_ms'))} | "
              f"{_x(timing.get('speedup_vs_eager'), label)} | "
              f"{_x(timing.get('speedup_vs_compile'), label)} | "
              f"{_pct(timing.get('pct_of_floor'))} |", ""]
    if timing.get("baselines_timed_s_ago") is not None:
        timed = timing.get("candidate_ms") is not None
        before = "this run's kernel" if timed else "this run's integrator"
        after = ("the kernel's output sample was checked against theirs." if timed
                 else "no kernel was timed.")
        lines += [f"Eager and torch.compile were timed {timing['baselines_timed_s_ago']:.0f} s "
                  f"before {before}, by this workspace's bench of the unchanged case (kept ten "
                  f"minutes at most); {after}", ""]
    for key, what in (("eager_error", "eager"), ("compile_error", "torch.compile"),
                      ("candidate_error", "the kernel")):
        if timing.get(key):
            lines += [f"{what} was not timed: {timing[key]}", ""]
    verdict = "accepted" if verification.get("accepted") else "REJECTED"
    lines += ["## Final verification", "",
              f"{verdict} on input sets {', '.join(verification.get('input_sets', []))} "
              f"with fresh seeds.", "", "| check | result | detail |", "| --- | --- | --- |"]
    for c in verification.get("checks", []):
        detail = str(c.get("detail", "")).replace("|", "\\|").replace("\n", " ")[:160]
        lines.append(f"| {c.get('name')} | {'pass' if c.get('passed') else 'FAIL'} | {detail} |")
    plan = arch.details["plan"]
    lines += ["", "## Plan (architect)", "", "| rank | region | fusion | expected gain ms |",
              "| ---: | --- | --- | ---: |"]
    for t in plan["targets"]:
        lines.append(f"| {t['rank']} | {t['region']} | {t['fusion']} | "
                     f"{_ms(t['expected_gain_ms'])} |")
    regions = arch.details.get("regions")
    if regions:
        lines += _region_lines(regions)
    if opt is not None:
        lines += ["", "## Iterations", "",
                  "| iteration | phase | verdict | median ms | vs eager | % of floor | commit |",
                  "| ---: | --- | --- | ---: | ---: | ---: | --- |"]
        for it in iterations:
            lines.append(f"| {it['iteration']} | {it.get('phase', 'optimizer')} | {it['verdict']} "
                         f"| {_ms(it['median_ms'])} | {_x(it['speedup'], label)} | "
                         f"{_pct(it.get('pct_of_floor'))} | `{str(it['commit'])[:10]}` |")
        unfused = opt.details.get("unfused") or []
        if unfused:
            lines += ["", "Not fused: " + "; ".join(f"{u['op']} ({u.get('reason', '')})"
                                                    for u in unfused)]
    if acc is not None:
        d = acc.details
        lines += ["", "## Tuning (accelerator)", "",
                  f"{d['gpu']}. {d['budget']['trials_run']} trial(s) of "
                  f"{d['budget'].get('space_size', 1)} configuration(s); winner "
                  f"`{d['winner']['config']}` at {_ms(d['winner']['median_ms'])} ms."]
    if chart:
        lines += ["", f"![latency and % of floor per iteration]({chart})"]
    if archive_hint:
        lines += ["", f"Archive: `{archive_hint}`"]
    lines += _usage_lines(arch)
    return "\n".join(lines) + "\n"


def _region_lines(regions: dict[str, Any]) -> list[str]:
    """The architect's regions: where the eager time went and what the engine took."""
    from kopt.phases.regions import ranked

    lines = ["", f"## Regions (architect, {regions['timing_label']} per-op times on "
                 f"{regions['input_set']})", "",
             "| region | ms | % | floor ms | above floor ms | engine |",
             "| --- | ---: | ---: | ---: | ---: | --- |"]
    for r in ranked(regions):
        lines.append(f"| {r['region']} | {_ms(r['time_ms'])} | {r.get('pct', 0):.1f}% | "
                     f"{_ms(r['floor_ms'])} | {_ms(r['above_floor_ms'])} | {r['engine']} |")
    return lines


def _usage_lines(arch: Manifest) -> list[str]:
    """How to put the approved kernels into the user's own model (`kopt export`)."""
    from kopt.phases.export import usage_snippet

    package = f"kopt_{arch.case}"
    return ["", "## Use it in your code", "",
            f"After `kopt approve {arch.run_id}`, `kopt export {arch.run_id} --out {package}` "
            f"writes a package that patches an existing model instance in place (its weights "
            f"are kept; a model of another structure is refused):", "", "```python",
            usage_snippet("Model", package), "```"]


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a and b else None
