"""`kopt baseline CASE`: time the model eager and under torch.compile, against the roofline.

Each variant is measured in its own worker (harness.runner.measure_variant). On a machine
without a GPU the case runs on its `smoke` inputs on the CPU and every figure is labelled
`cpu-interpreter`: it shows the case runs, not how fast a GPU is.
"""

from __future__ import annotations

import argparse
from typing import Any

from rich.table import Table

from kopt.harness.case import load_case
from kopt.harness.device import resolve_device, timing_label
from kopt.harness.runner import DEFAULT_TIMEOUT, measure_variant
from kopt.workbench.output import console, err_console, print_json_line, working
from kopt.workbench.sandbox_option import add_option


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("baseline", help="time a case eager and under torch.compile")
    p.add_argument("case", metavar="CASE", help="bundled case name or case directory")
    p.add_argument("--profile", action="store_true",
                   help="also trace with torch.profiler and list the top kernels, the model "
                        "summary and the time by region and module")
    p.add_argument("--json", action="store_true", help="print a JSON object as the last line")
    p.add_argument("--device", choices=["cpu", "cuda"], default=None,
                   help="override the case's device (cpu runs the smoke inputs)")
    p.add_argument("--skip-compile", action="store_true",
                   help="time eager only (torch.compile can take a minute on the CPU)")
    p.add_argument("--target", default=None, help="where to run: local (default), ssh://...")
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT,
                   help=f"seconds per variant before its worker is killed (default {DEFAULT_TIMEOUT:.0f})")
    add_option(p)
    p.set_defaults(func=handle)


def _fmt(value: float | None, spec: str = ".3f") -> str:
    return "-" if value is None else format(value, spec)


def _row(m: dict[str, Any], eager_ms: float | None) -> list[str]:
    if not m.get("ok"):
        return [m["variant"], "[red]failed[/red]", "", "", "", "", "", ""]
    lat = m["latency_ms"]
    speedup = eager_ms / lat["median"] if eager_ms and lat["median"] else None
    corr = m["correctness"]
    verdict = ("ok" if corr.get("passed") else "[red]differs[/red]" if corr.get("checked")
               else "-")
    return [m["variant"], _fmt(lat["median"], ".4g"), f"{_fmt(lat['p20'], '.3g')}-{_fmt(lat['p80'], '.3g')}",
            _fmt(m["throughput"]["gbps"], ".1f"), _fmt(m["throughput"]["tflops"], ".2f"),
            _fmt(m["roofline"]["pct_of_floor"], ".1f"), _fmt(speedup, ".2f") + "x", verdict]


def handle(args: argparse.Namespace) -> int:
    case = load_case(args.case)
    device = resolve_device(case, args.device)
    variants = ["eager"] if args.skip_compile else ["eager", "compile"]
    results: dict[str, dict[str, Any]] = {}
    with working(f"measuring {case.name} on {device}") as clock:
        for variant in variants:
            if not args.json:
                err_console.print(f"[dim]measuring {case.name} {variant} on {device}...[/dim]")
            clock.restart(f"measuring {case.name} {variant} on {device}")
            results[variant] = measure_variant(case, variant, device=device,
                                               profile=args.profile, target=args.target,
                                               timeout=args.timeout)
    eager = results["eager"]
    label = timing_label(device)
    summary = regions = None
    if args.profile and eager.get("ok"):
        summary, regions = _model_profile(case, device, str(eager.get("input_set")), args.json)
    input_set = eager.get("input_set")
    roofline = eager.get("roofline") if eager.get("ok") else None
    environment = next((m.get("environment") for m in results.values() if m.get("ok")), None)
    if args.json:
        variants_out = {k: {kk: vv for kk, vv in m.items() if kk != "environment"}
                        for k, m in results.items()}
        print_json_line({"ok": bool(eager.get("ok")), "case": case.name, "device": device,
                         "input_set": input_set, "timing_label": label, "roofline": roofline,
                         "variants": variants_out, "environment": environment,
                         **({"model_summary": summary, "regions": regions} if args.profile else {})})
        return 0 if eager.get("ok") else 1

    title = f"{case.name} baseline on {device} ({input_set} inputs, {label})"
    table = Table(title=title)
    # "out": do the variant's outputs match eager's (within the case's tolerance)?
    for col in ("variant", "median ms", "p20-p80", "GB/s", "TFLOP/s", "%floor", "speedup", "out"):
        table.add_column(col, justify="left" if col in ("variant", "out") else "right",
                         min_width=13 if col == "p20-p80" else None)
    eager_ms = eager["latency_ms"]["median"] if eager.get("ok") else None
    for m in results.values():
        table.add_row(*_row(m, eager_ms))
    console.print(table)
    if roofline:
        floor = roofline.get("floor_ms")
        floor_text = (f"floor {floor:.4f} ms ({roofline['bound']}-bound)" if floor is not None
                      else "no floor: the CPU interpreter has no GPU ceilings")
        console.print(f"roofline: {roofline['bytes'] / 1e6:.3f} MB must move, "
                      f"{roofline['flops'] / 1e9:.3f} GFLOP; {floor_text}")
    if label == "cpu-interpreter":
        console.print("[yellow]cpu-interpreter timings: the case runs; these are not GPU "
                      "figures.[/yellow]")
    for m in results.values():
        if not m.get("ok"):
            console.print(f"[red]{m['variant']} failed:[/red] {m.get('error')}")
        elif m["correctness"].get("checked") and not m["correctness"].get("passed"):
            console.print(f"[red]{m['variant']} differs from eager:[/red] "
                          f"{m['correctness'].get('detail')}")
        elif args.profile and m.get("profile"):
            _print_profile(m)
    if summary is not None:
        _print_summary(summary)
    if regions is not None:
        _print_regions(regions)
    if eager.get("ok"):
        console.print(f"[dim]metrics: {eager['artifacts_dir']}/metrics.json[/dim]")
    return 0 if eager.get("ok") else 1


def _model_profile(case: Any, device: str, input_set: str, quiet: bool
                   ) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """The model summary (main inputs) and the region/module profile (the timed input set);
    either is None, with a one-line reason, when the model does not allow it."""
    from kopt.harness.summary import model_summary
    from kopt.phases.regions import profile_regions

    summary = regions = None
    try:
        summary = model_summary(case, "main")
    except Exception as err:  # noqa: BLE001 - the timing table still stands
        err_console.print(f"no model summary: {type(err).__name__}: {err}")
    if not quiet:
        err_console.print(f"[dim]profiling {case.name} by region and module on {device}...[/dim]")
    try:
        regions = profile_regions(case, input_set, device)
    except Exception as err:  # noqa: BLE001
        err_console.print(f"no region profile: {type(err).__name__}: {str(err)[:200]}")
    return summary, regions


def _print_profile(m: dict[str, Any]) -> None:
    p = m["profile"]
    unit = "device" if p["by"] == "device" else "CPU"
    table = Table(title=f"{m['variant']}: top kernels by {unit} time over {p['iterations']} calls")
    table.add_column("kernel" if p["by"] == "device" else "op", overflow="fold")
    table.add_column("calls", justify="right")
    table.add_column("total ms", justify="right")
    table.add_column("%", justify="right")
    for k in p["kernels"]:
        table.add_row(k["name"], str(k["calls"]), f"{k['total_ms']:.3f}", f"{k['pct']:.1f}")
    console.print(table)
    console.print(f"[dim]trace: {p['trace_file']}[/dim]")


def _print_summary(summary: dict[str, Any]) -> None:
    flops = summary.get("flops")
    table = Table(title=f"model summary: {summary['total_params']:,} parameters "
                        f"({summary.get('param_bytes', 0) / 1e6:.1f} MB), "
                        f"{'-' if flops is None else f'{flops / 1e9:.3f}'} GFLOP per forward "
                        f"({summary.get('input_set')} inputs)")
    for col in ("layer", "type", "output shape", "params", "MB", "GFLOP"):
        table.add_column(col, justify="left" if col in ("layer", "type", "output shape") else "right")
    for layer in summary["layers"]:
        shape = layer["output_shape"]
        shape = "x".join(map(str, shape)) if isinstance(shape, list) and \
            all(isinstance(d, int) for d in shape) else str(shape)
        table.add_row(layer["name"], layer["type"], shape, f"{layer.get('params', 0):,}",
                      f"{layer.get('bytes', 0) / 1e6:.3f}", f"{layer.get('flops', 0.0) / 1e9:.3f}")
    console.print(table)


def _print_regions(profile: dict[str, Any]) -> None:
    from kopt.phases.regions import ranked

    table = Table(title=f"time by region, ranked by time above floor ({profile['timing_label']}, "
                        f"{profile['input_set']} inputs, {profile['total_ms']:.3f} ms summed over ops)")
    for col in ("rank", "region", "ms", "%", "floor ms", "above floor", "engine"):
        table.add_column(col, justify="left" if col in ("region", "engine") else "right",
                         overflow="fold")
    for i, r in enumerate(ranked(profile), start=1):
        table.add_row(str(i), r["region"], f"{r['time_ms']:.4f}", f"{r['pct']:.1f}",
                      _fmt(r["floor_ms"], ".4f"), _fmt(r["above_floor_ms"], ".4f"),
                      "[green]yes[/green]" if r["engine"] == "yes" else r["engine"])
    console.print(table)
    console.print(f"[dim]{profile['note']}[/dim]")
    console.print("by module: " + ", ".join(f"{m['module']} {m['time_ms']:.3f} ms ({m['pct']:.0f}%)"
                                            for m in profile.get("modules", [])[:12]))
