"""Where a whole model's time goes: a profile attributed to modules and to regions.

A *region* is a stretch of the exported graph: either one library call (GEMM, convolution,
attention: what cuBLAS, cuDNN and flash attention already do well, kept as PyTorch calls by
the offline engineer) or the ops between two library calls (norms, activations, residual
adds, rotary embeddings: what the engine fuses into generated Triton kernels). Each region
gets its measured eager time, the bytes that cross its boundary, its FLOPs, its roofline
floor (on a GPU; none on the CPU), the time above that floor, and whether the offline engine
can take it.

Times come from running the exported program node by node (torch.fx Interpreter) with the
device synchronised around each node: on the CPU they are eager CPU times (`cpu-eager`), on
a GPU per-op times that include each op's launch (`cuda-per-op`); neither is the fused
forward's time, and both are labelled so. Module times add up the nodes each module's
forward produced (export's `nn_module_stack`).
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path
from typing import Any

import torch

from kopt.harness.case import Case

# Ops that stay library calls in a candidate (the offline engineer keeps them in PyTorch or
# fuses only their epilogue): region kind by ATen packet name.
LIBRARY_KINDS = {
    "mm": "GEMM", "addmm": "GEMM", "bmm": "GEMM", "baddbmm": "GEMM", "linear": "GEMM",
    "convolution": "convolution", "scaled_dot_product_attention": "attention",
    "_scaled_dot_product_flash_attention_for_cpu": "attention",
    "_scaled_dot_product_flash_attention": "attention",
    "_scaled_dot_product_efficient_attention": "attention",
    "_scaled_dot_product_cudnn_attention": "attention",
}
# Ops that only re-index (no time worth a region of their own).
VIEW_OPS = {"view", "_unsafe_view", "reshape", "permute", "transpose", "t", "expand",
            "unsqueeze", "squeeze", "slice", "select", "alias", "unbind", "split",
            "split_with_sizes", "chunk", "as_strided", "detach", "getitem", "sym_size",
            "_assert_tensor_metadata", "_assert_scalar"}
# Shorter names of ATen ops in region names (the `ops` lists keep ATen's).
FRIENDLY = {"_native_batch_norm_legit_no_training": "batch_norm", "native_layer_norm": "layer_norm",
            "_to_copy": "cast", "_softmax": "softmax", "_log_softmax": "log_softmax"}
# Timed passes over the program (after one warm-up pass); each node's median is kept.
ITERATIONS = 3


def _packet(target: Any) -> str:
    op = getattr(target, "overloadpacket", None)
    return op.__name__ if op is not None else str(getattr(target, "__name__", target))


def _val_bytes(node: torch.fx.Node) -> int:
    val = node.meta.get("val")
    vals = val if isinstance(val, (list, tuple)) else [val]
    total = 0
    for v in vals:
        if isinstance(v, torch.Tensor):
            try:
                total += int(v.numel()) * v.element_size()
            except Exception:  # noqa: BLE001 - a symbolic size: count nothing
                pass
    return total


def _module_of(node: torch.fx.Node) -> str:
    stack = node.meta.get("nn_module_stack") or {}
    if not stack:
        return "(forward)"
    path, _cls = list(stack.values())[-1]
    return path if path and not path.startswith("_") else "(forward)"


def _time_nodes(gm: torch.fx.GraphModule, args: list[Any], kwargs: dict[str, Any],
                device: str) -> tuple[dict[str, float], dict[str, float]]:
    """Median ms and FLOPs of every call_function node over `ITERATIONS` runs."""
    from kopt.harness.roofline import flop_counter

    gpu = device.startswith("cuda")
    samples: dict[str, list[float]] = {}
    flops: dict[str, float] = {}

    class Timed(torch.fx.Interpreter):
        counting = False

        def run_node(self, n: torch.fx.Node) -> Any:
            if n.op != "call_function":
                return super().run_node(n)
            if self.counting:
                with flop_counter() as counter:
                    out = super().run_node(n)
                flops[n.name] = float(counter.get_total_flops())
                return out
            if gpu:
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            out = super().run_node(n)
            if gpu:
                torch.cuda.synchronize()
            samples.setdefault(n.name, []).append((time.perf_counter() - t0) * 1e3)
            return out

    interp = Timed(gm)
    flat = list(args) + list(kwargs.values())
    threads = torch.get_num_threads()
    if not gpu:
        # One thread: a CPU op on small tensors otherwise waits on a shared thread pool (40 ms
        # per LayerNorm vs 0.04 ms on a loaded 2-core machine) and every region reads the same.
        torch.set_num_threads(1)
    try:
        return _run_timed(interp, flat, samples, flops)
    finally:
        torch.set_num_threads(threads)


def _run_timed(interp: Any, flat: list[Any], samples: dict[str, list[float]],
               flops: dict[str, float]) -> tuple[dict[str, float], dict[str, float]]:
    with torch.no_grad():
        interp.counting = True
        interp.run(*flat)
        interp.counting = False
        samples.clear()
        for _ in range(ITERATIONS):
            interp.run(*flat)
    return {k: statistics.median(v) for k, v in samples.items()}, flops


def profile_regions(case: Case, input_set: str, device: str = "cpu") -> dict[str, Any]:
    """The region and module profile of the case's eager model on `input_set` (see module doc)."""
    from kopt.harness.data import agent_provide_inputs, build_model
    from kopt.harness.roofline import Cost, case_dtype, ceilings, floor_ms
    from kopt.phases.engineers.offline.capture import _export, lower_program
    from kopt.phases.engineers.offline.fusion import partition

    model = build_model(case, input_set, device=device)
    inputs = agent_provide_inputs(case, input_set, device=device)
    ep, _dynamic = _export(model, list(inputs.args), dict(inputs.kwargs))
    unfused: dict[str, str] = {}
    try:
        part = partition(lower_program(ep))
        unfused = {u["node"]: u["reason"] for u in part.unfused}
        engine_ok = True
    except Exception as err:  # noqa: BLE001 - the engine cannot take the model: say why
        engine_ok, engine_error = False, f"{type(err).__name__}: {err}"
    gm = ep.module()
    times, flops = _time_nodes(gm, list(inputs.args), dict(inputs.kwargs), device)

    nodes = [n for n in gm.graph.nodes if n.op == "call_function" and n.name in times]
    regions: list[dict[str, Any]] = []
    current: dict[str, Any] | None = None
    for n in nodes:
        packet = _packet(n.target)
        kind = LIBRARY_KINDS.get(packet)
        if kind is not None:
            regions.append({"kind": kind, "nodes": [n]})
            current = None
        else:
            if current is None:
                current = {"kind": "fusable", "nodes": []}
                regions.append(current)
            current["nodes"].append(n)

    ceil = ceilings(device)
    times_note = "" if device.startswith("cuda") else " (one CPU thread)"
    dtype = case_dtype(case, input_set)
    out: list[dict[str, Any]] = []
    for r in regions:
        members = set(r["nodes"])
        ops = [_packet(n.target) for n in r["nodes"]]
        if r["kind"] == "fusable" and all(op in VIEW_OPS for op in ops):
            continue  # re-indexing only: no time, no kernel
        read: dict[torch.fx.Node, int] = {}
        for n in r["nodes"]:
            for i in n.all_input_nodes:
                if i not in members:
                    read[i] = _val_bytes(i)
        written = sum(_val_bytes(n) for n in r["nodes"]
                      if any(u not in members for u in n.users) or not n.users)
        nbytes = sum(read.values()) + written
        nflops = sum(flops.get(n.name, 0.0) for n in r["nodes"])
        t = sum(times[n.name] for n in r["nodes"])
        floor = floor_ms(Cost(bytes=nbytes, flops=nflops), ceil, dtype, case.manifest.precision)
        modules = list(dict.fromkeys(_module_of(n) for n in r["nodes"]
                                     if _packet(n.target) not in VIEW_OPS)) or ["(forward)"]
        left = [f"{n.name} ({unfused[n.name]})" for n in r["nodes"] if n.name in unfused]
        if r["kind"] != "fusable":
            engine, why = "library", f"kept as a {r['kind']} library call"
            if r["kind"] == "GEMM":
                why += "; its bias/activation/residual epilogue fuses into a Triton GEMM"
        elif not engine_ok:
            engine, why = "no", f"the offline engine cannot take this model ({engine_error})"
        elif left and len(left) == len([n for n in r["nodes"] if _packet(n.target) not in VIEW_OPS]):
            engine, why = "no", "stays in PyTorch: " + "; ".join(left)
        elif left:
            engine, why = "partly", "stays in PyTorch: " + "; ".join(left)
        else:
            engine, why = "yes", "generated as fused Triton kernels"
        compute = [op for op in ops if op not in VIEW_OPS]
        name = (f"{r['kind']} {modules[0]}" if r["kind"] != "fusable" else
                f"{' + '.join(dict.fromkeys(FRIENDLY.get(op, op) for op in compute))[:60]} "
                f"({', '.join(modules)[:40]})")
        out.append({"region": name, "kind": r["kind"], "ops": compute, "modules": modules,
                    "time_ms": round(t, 6), "bytes": int(nbytes), "flops": nflops,
                    "floor_ms": floor,
                    "above_floor_ms": None if floor is None else round(max(0.0, t - floor), 6),
                    "engine": engine, "why": why})
    total = sum(r["time_ms"] for r in out) or 1.0
    for r in out:
        r["pct"] = round(100.0 * r["time_ms"] / total, 2)
    by_module: dict[str, float] = {}
    for n in nodes:
        by_module[_module_of(n)] = by_module.get(_module_of(n), 0.0) + times[n.name]
    modules_out = [{"module": k, "time_ms": round(v, 6), "pct": round(100.0 * v / total, 2)}
                   for k, v in sorted(by_module.items(), key=lambda kv: -kv[1])]
    gpu = device.startswith("cuda")
    return {"timing_label": "cuda-per-op" if gpu else "cpu-eager", "device": device,
            "input_set": input_set, "iterations": ITERATIONS, "total_ms": round(total, 6),
            "note": ("per-op eager times, the device synchronised around each op (launch "
                     "overhead included); floors from this GPU's measured ceilings") if gpu else
                    (f"eager CPU times per op{times_note} (not GPU figures); no floor on the CPU: regions "
                     "rank by time"),
            "regions": out, "modules": modules_out}


def ranked(profile: dict[str, Any]) -> list[dict[str, Any]]:
    """Regions by time above floor (by time where there is no floor), largest first."""
    return sorted(profile.get("regions", []),
                  key=lambda r: -(r["above_floor_ms"] if r["above_floor_ms"] is not None
                                  else r["time_ms"]))


def region_targets(profile: dict[str, Any], baseline_ms: float,
                   no_floor_gain_share: float) -> list[dict[str, Any]]:
    """Plan targets (schemas/plan.json) for a model with library calls: the regions the engine
    can take, ranked by time above floor, scaled from per-op time to the measured forward."""
    scale = baseline_ms / (profile.get("total_ms") or baseline_ms or 1.0)
    targets = []
    for r in ranked(profile):
        if r["engine"] not in ("yes", "partly"):
            continue
        time_ms = r["time_ms"] * scale
        floor = None if r["floor_ms"] is None else r["floor_ms"]
        gain = (time_ms - floor) if floor is not None else time_ms * no_floor_gain_share
        targets.append({"rank": len(targets) + 1, "region": r["region"], "ops": r["ops"],
                        "fusion": f"fuse {len(r['ops'])} op(s) of {', '.join(r['modules'])} "
                                  f"into Triton kernel(s) between the library calls",
                        "time_ms": round(time_ms, 6), "floor_ms": floor,
                        "expected_gain_ms": round(max(0.0, gain), 6),
                        "rationale": f"{r['pct']:.1f}% of the per-op time "
                                     f"({profile['timing_label']}); {r['why']}"})
    return targets


def profile_text(profile: dict[str, Any], *, limit: int = 20) -> str:
    """The ranked region table and the module table as plain text."""
    lines = [f"regions ({profile['timing_label']}, {profile['input_set']} inputs, "
             f"{profile['total_ms']:.3f} ms per forward summed over ops): {profile['note']}",
             f"{'rank':>4} {'region':<46} {'ms':>9} {'%':>6} {'floor ms':>9} {'above':>9}  engine"]
    for i, r in enumerate(ranked(profile)[:limit], start=1):
        fl = "-" if r["floor_ms"] is None else f"{r['floor_ms']:.4f}"
        ab = "-" if r["above_floor_ms"] is None else f"{r['above_floor_ms']:.4f}"
        lines.append(f"{i:>4} {r['region'][:46]:<46} {r['time_ms']:>9.4f} {r['pct']:>6.1f} "
                     f"{fl:>9} {ab:>9}  {r['engine']}")
    lines.append("modules: " + ", ".join(f"{m['module']} {m['time_ms']:.3f} ms ({m['pct']:.0f}%)"
                                         for m in profile.get("modules", [])[:12]))
    return "\n".join(lines)


def run_regions(run_dir: Path) -> dict[str, Any] | None:
    """The architect's region profile of a run (`manifests/<run-id>/`), for screens: `regions`
    (each with `region`, `kind`, `time_ms`, `floor_ms`, `above_floor_ms`, `engine`, `why`),
    `modules`, `timing_label`; None when the run has no architect manifest or no profile."""
    path = Path(run_dir) / "architect.json"
    if not path.is_file():
        return None
    try:
        details = json.loads(path.read_text()).get("details") or {}
    except (OSError, ValueError):
        return None
    return details.get("regions")
