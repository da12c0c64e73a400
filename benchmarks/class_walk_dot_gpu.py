"""The class-walk convolution's tl.dot loop against cuDNN, on the transposed convolutions of
KernelBench problems (strict float32: TF32 off, as the harness times a case).

    python benchmarks/class_walk_dot_gpu.py FILE.py ...

Per problem file (imported as `kopt import-kernelbench` does, at its GPU size): every
nn.ConvTranspose{1,2,3}d of the model is found with its input (a forward hook on the main
inputs); a one-convolution case is generated with the offline engineer (its `conv` kernel walks
residue classes of the stride when the stride is above 1); the kernel's launcher is timed under
a small grid of tile configurations (CUDA events, median of 30 after 5 warm-ups) beside
cuDNN's `conv_transpose{dims}d` with TF32 off. The max abs difference from cuDNN is printed
per row; the table is last.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import tempfile
import textwrap
from pathlib import Path

import torch
import torch.nn.functional as F
from conv_layout_gpu import ms  # beside this script: CUDA events, median after warm-ups

DEVICE = os.environ.get("KOPT_BENCH_DEVICE", "cuda")  # "cpu" (TRITON_INTERPRET=1): a dry run
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

CONFIGS = [  # BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages
    (128, 64, 32, 4, 3), (64, 64, 32, 4, 3), (128, 128, 32, 8, 3), (64, 32, 32, 4, 3),
    (128, 64, 16, 4, 4), (256, 64, 32, 8, 3), (128, 32, 32, 4, 3), (64, 128, 32, 4, 3),
]

MODEL = '''
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.{cls}({cin}, {cout}, {k}, stride={s}, padding={p},
                             output_padding={op}, groups={g}, bias={bias}, dilation={d})

    def forward(self, x):
        return self.conv(x)
'''


def transposed_convs(case):
    """(module, input shape) of each transposed convolution the case's model runs."""
    from kopt.harness.data import agent_provide_inputs, build_model

    model = build_model(case, "main")
    inputs = agent_provide_inputs(case, "main", 1, device="cpu")
    found = []
    hooks = [m.register_forward_hook(lambda mod, a, out: found.append((mod, tuple(a[0].shape))))
             for m in model.modules() if isinstance(m, torch.nn.modules.conv._ConvTransposeNd)]
    with torch.no_grad():
        # meta tensors would do; the CPU forward at GPU size is slow, so only up to the convs
        try:
            model.to("meta")(*[a.to("meta") if torch.is_tensor(a) else a for a in inputs.args])
        except Exception:  # noqa: BLE001 (ops past the convolution may not run on meta)
            pass
    for h in hooks:
        h.remove()
    return found


def main() -> None:
    from kopt.harness.case import load_case_dir
    from kopt.harness.kernelbench import import_kernelbench
    from kopt.phases.engineers.offline import generate_candidate

    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    work = Path(tempfile.mkdtemp())
    rows = []
    for f in sys.argv[1:]:
        p = Path(f)
        case = load_case_dir(import_kernelbench(p, name=f"p{p.stem.split('_')[0]}",
                                                out=work / p.stem))
        for i, (conv, shape) in enumerate(transposed_convs(case)):
            label = f"{p.stem.split('_')[0]}.{i} {tuple(shape)} k{conv.kernel_size} s{conv.stride}"
            d = work / f"{p.stem}_{i}"
            d.mkdir()
            (d / "model.py").write_text(textwrap.dedent(MODEL.format(
                cls=type(conv).__name__, cin=conv.in_channels, cout=conv.out_channels,
                k=conv.kernel_size, s=conv.stride, p=conv.padding, op=conv.output_padding,
                g=conv.groups, bias=conv.bias is not None, d=conv.dilation)))
            (d / "manifest.yaml").write_text(
                f"name: convt{i}\nmodel: {{module: model.py, class: Model}}\n"
                f"inputs:\n  args:\n    - {{shape: {list(shape)}, dtype: float32, init: normal}}\n")
            result = generate_candidate(load_case_dir(d))
            kern = next((k for k in result.kernels if k["kind"] == "conv"), None)
            x = torch.randn(shape, device=DEVICE)
            # the model was run on meta tensors: weights of its shapes, at nn.Module's scale
            w = torch.randn(conv.weight.shape, device=DEVICE) * conv.weight.shape[1] ** -0.5
            b = torch.randn(conv.bias.shape, device=DEVICE) if conv.bias is not None else None
            fn = getattr(F, f"conv_transpose{len(shape) - 2}d")

            def cudnn(x=x, w=w, b=b, fn=fn, conv=conv):
                return fn(x, w, b, conv.stride, conv.padding, conv.output_padding, conv.groups,
                          conv.dilation)

            ref = cudnn()
            base = ms(cudnn, iters=30, warm=5) if DEVICE == "cuda" else 0.0
            rows.append((label, "cuDNN", base, 0.0))
            print(rows[-1], flush=True)
            if kern is None:
                print(label, "no conv kernel generated", flush=True)
                continue
            path = d / "cand.py"
            path.write_text(result.source)
            spec = importlib.util.spec_from_file_location(f"cand_{p.stem}_{i}", path)
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
            launch = getattr(mod, f"_launch_{kern['name'].split('_')[1]}")
            args = (x, w) + ((b,) if b is not None else ())
            for bm, bn, bk, warps, stages in CONFIGS:
                mod.KOPT_CONFIG[kern["name"]].update(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk,
                                                     num_warps=warps, num_stages=stages)
                try:
                    (y,) = launch(DEVICE, *args)
                    if DEVICE == "cuda":
                        torch.cuda.synchronize()
                    err = float((y - ref).abs().max())
                    t = ms(lambda: launch(DEVICE, *args), iters=30, warm=5) \
                        if DEVICE == "cuda" else 0.0  # noqa: B023
                except Exception as e:  # noqa: BLE001
                    print(label, bm, bn, bk, warps, stages, "failed:", str(e).splitlines()[0],
                          flush=True)
                    continue
                rows.append((label, f"{bm}x{bn}x{bk} w{warps} s{stages}", t, err))
                print(rows[-1], flush=True)
            del x, y, ref
            if DEVICE == "cuda":
                torch.cuda.empty_cache()
    print("\n| conv (input, window, stride) | kernel | ms | max abs diff |")
    print("| --- | --- | ---: | ---: |")
    for label, name, t, err in rows:
        print(f"| {label} | {name} | {t:.3f} | {err:.1e} |")


if __name__ == "__main__":
    main()
