"""The resident recurrent kernel's product, written four ways, against float64 and timed.

    python benchmarks/recurrent_precision_gpu.py KERNELBENCH_FILE.py

Generates the offline candidate of a recurrent KernelBench file (for its `_recurrent`), then
writes the resident kernel's recurrent product as generated (`orig`, TF32x3), with the bias as
the product's accumulator, as three explicit TF32 products of truncated halves (`split3`), and
in float32 (`ieee`); for a GRU, a bidirectional GRU and an LSTM (six layers, hidden 256, 10
sequences) on draws like the verifier's hard ones (values spread to 200, negative at mixed
scales by row) and on plain ones, prints each variant's relative error to float64 (the layer
kernel, LAYER 1, and cuDNN in float32 beside them) and, at 512 steps, its median ms.
"""
import functools
import importlib.util
import sys
import tempfile
from pathlib import Path

import torch
import triton.testing

sys.path.insert(0, ".")
from kopt.harness.case import load_case_dir
from kopt.harness.kernelbench import import_kernelbench
from kopt.phases.engineers.offline.engineer import generate_candidate

ORIG = "        acc = tl.dot(hk, w, input_precision=DOT) + bias[None, :]\n"
VARIANTS = {
    "orig": ORIG,
    "bias_acc": "        acc = tl.dot(hk, w, tl.zeros((BB, GP * BU), tl.float32) + bias[None, :], input_precision=DOT)\n",
    "split3": ("        w_hi = (w.to(tl.uint32, bitcast=True) & 0xFFFFE000).to(tl.float32, bitcast=True)\n"
               "        h_hi = (hk.to(tl.uint32, bitcast=True) & 0xFFFFE000).to(tl.float32, bitcast=True)\n"
               "        acc = tl.zeros((BB, GP * BU), tl.float32) + bias[None, :]\n"
               "        acc = tl.dot(h_hi, w - w_hi, acc, input_precision=\"tf32\")\n"
               "        acc = tl.dot(hk - h_hi, w_hi, acc, input_precision=\"tf32\")\n"
               "        acc = tl.dot(h_hi, w_hi, acc, input_precision=\"tf32\")\n"),
    "ieee": "        acc = tl.dot(hk, w, input_precision=\"ieee\") + bias[None, :]\n",
}


def _candidates(f: Path) -> dict[str, object]:
    """The generated candidate's module once per product variant."""
    out = Path(tempfile.mkdtemp())
    d = import_kernelbench(f, name=f.stem, out=out / "case", report={}, warm=True)
    src = generate_candidate(load_case_dir(d)).source
    assert ORIG in src
    mods = {}
    for name, line in VARIANTS.items():
        p = out / f"cand_{name}.py"
        p.write_text(src.replace(ORIG, line))
        spec = importlib.util.spec_from_file_location(f"cand_{name}", p)
        m = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = m
        spec.loader.exec_module(m)
        mods[name] = m
    return mods


def _hard(shape: tuple[int, ...], gen: torch.Generator) -> torch.Tensor:
    """Like the verifier's hard draw: uniform values spread to 200, negative, rows scaled by
    10^-3u."""
    x = torch.rand(shape, generator=gen) * 200
    rows = torch.pow(10.0, -3.0 * torch.rand(shape[0], generator=gen))
    return -x.abs() * rows.view(-1, *([1] * (len(shape) - 1)))


def main(f: Path) -> None:
    mods = _candidates(f)
    torch.backends.cudnn.allow_tf32 = False
    for kind, bidir in (("gru", False), ("gru", True), ("lstm", False)):
        torch.manual_seed(0)
        net = (torch.nn.GRU if kind == "gru" else torch.nn.LSTM)(128, 256, 6, bidirectional=bidir)
        dirs = 2 if bidir else 1
        args = (True, 6, 0.0, False, bidir, False)
        op = getattr(torch.ops.aten, kind).input
        wc = [w.cuda() for w in net._flat_weights]
        for steps, draw in ((4, "hard"), (64, "hard"), (512, "rand")):
            gen = torch.Generator().manual_seed(steps)
            shapes = ((steps, 10, 128), (6 * dirs, 10, 256), (6 * dirs, 10, 256))
            x, h0, c0 = (_hard(s, gen) if draw == "hard" else torch.rand(s, generator=gen) for s in shapes)
            hx64 = [h0.double(), c0.double()] if kind == "lstm" else h0.double()
            want = op(x.double(), hx64, [w.double() for w in net._flat_weights], *args)
            xc = x.cuda()
            hxc = [h0.cuda(), c0.cuda()] if kind == "lstm" else h0.cuda()

            def err(got, want=want) -> float:  # noqa: ANN001
                return max(((g.double().cpu() - w).norm() / w.norm()).item()
                           for g, w in zip(got, want, strict=True))

            line = [f"{kind}{'-bi' if bidir else ''} T={steps} {draw}", f"cudnn {err(op(xc, hxc, wc, *args)):.2e}"]
            for name, m in mods.items():
                for launch in ((1, 2) if name == "orig" else (2,)):
                    m.KOPT_CONFIG["_rnn_step_kernel"] = {
                        "LAYER": launch, "BH": 16 if launch == 2 else 32, "BK": 64,
                        "num_warps": 8 if launch == 2 else 4, "num_stages": 3}
                    run = functools.partial(m._recurrent, kind, xc, hxc, wc, *args)
                    ms = ""
                    if steps == 512:
                        ms = f" {triton.testing.do_bench(run, warmup=3, rep=300, return_mode='median'):.2f}ms"
                    line.append(f"{name}/L{launch} {err(run()):.2e}{ms}")
            print(" | ".join(line), flush=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
