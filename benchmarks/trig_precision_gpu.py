"""How exact Triton's float32 transcendentals are on this GPU, beside libdevice's.

    python benchmarks/trig_precision_gpu.py

For sin, cos, exp, log and tanh: the largest absolute and relative error of `tl.<f>` and of
`libdevice.<f>` against a float64 evaluation over argument ranges a model produces (a
diffusion timestep embedding takes sin and cos of up to 1000 rad), whether the compiled PTX
uses an approximate instruction (`sin.approx`, `ex2.approx`, ...), and each one's time over
64 M elements. Evidence for which form the offline engineer's kernels emit.
"""

from __future__ import annotations

from pathlib import Path

import torch
import triton

N = 1 << 26
RANGES = {"sin": [3.2, 100.0, 1000.0, 10000.0], "cos": [3.2, 100.0, 1000.0, 10000.0],
          "exp": [10.0, 80.0], "log": [1000.0], "tanh": [10.0]}


def _source(name: str, call: str) -> str:
    return f"""
@triton.jit
def {name}(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m, other=1.0)
    tl.store(y_ptr + offs, {call}(x), mask=m)
"""


def _forms() -> dict[tuple[str, str], object]:
    """One kernel per function and form, each its own source (a jitted closure over the
    function would share one compiled kernel across them)."""
    calls = {("sin", "tl"): "tl.sin", ("sin", "libdevice"): "libdevice.sin",
             ("cos", "tl"): "tl.cos", ("cos", "libdevice"): "libdevice.cos",
             ("exp", "tl"): "tl.exp", ("exp", "libdevice"): "libdevice.exp",
             ("log", "tl"): "tl.log", ("log", "libdevice"): "libdevice.log",
             ("tanh", "libdevice"): "libdevice.tanh"}
    import importlib.util
    import tempfile
    text = "import triton\nimport triton.language as tl\nfrom triton.language.extra import libdevice\n"
    names = {k: f"k_{k[0]}_{k[1]}" for k in calls}
    text += "".join(_source(names[k], c) for k, c in calls.items())
    path = Path(tempfile.mkdtemp()) / "trig_kernels.py"  # @triton.jit reads its source file
    path.write_text(text)
    spec = importlib.util.spec_from_file_location("trig_kernels", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return {k: getattr(module, n) for k, n in names.items()}


def _ms(f) -> float:  # type: ignore[no-untyped-def]
    for _ in range(3):
        f()
    times = []
    for _ in range(20):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        f()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b))
    return sorted(times)[len(times) // 2]


def main() -> None:
    print("torch", torch.__version__, "triton", triton.__version__, torch.cuda.get_device_name(0))
    g = torch.Generator(device="cuda").manual_seed(0)
    rows = []
    for (name, form), k in _forms().items():
        for r in RANGES[name]:
            x = (torch.rand(N, device="cuda", generator=g) * 2 - 1) * r
            if name == "log":
                x = x.abs() + 1e-3
            y = torch.empty_like(x)
            grid = (triton.cdiv(N, 1024),)
            compiled = k[grid](x, y, N, BLOCK=1024)
            ptx = compiled.asm.get("ptx", "")
            approx = sorted({w.split()[0] for w in ptx.split("\n") if ".approx" in w})
            want = getattr(torch, name)(x.double())
            err = (y.double() - want).abs()
            rel = float((err / want.abs().clamp_min(1e-6)).max())
            t = _ms(lambda: k[grid](x, y, N, BLOCK=1024))  # noqa: B023
            rows.append((name, form, r, float(err.max()), rel, t, ",".join(approx) or "-"))
            eager = float((getattr(torch, name)(x).double() - want).abs().max())
            rows[-1] += (eager,)
    print(f"{'fn':5} {'form':9} {'range':>8} {'max abs err':>12} {'max rel err':>12} "
          f"{'eager abs err':>13} {'ms':>7}  approx instructions")
    for name, form, r, a, rel, t, approx, eager in rows:
        print(f"{name:5} {form:9} {r:8g} {a:12.3e} {rel:12.3e} {eager:13.3e} {t:7.3f}  {approx}")


if __name__ == "__main__":
    main()
