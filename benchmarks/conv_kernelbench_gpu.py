"""The offline engineer's implicit-GEMM convolution against cuDNN on KernelBench's own sizes.

    python benchmarks/conv_kernelbench_gpu.py ../shared/kernelbench/level1/{50..81}_*.py

For each problem: import it (`kopt import-kernelbench`, into a temporary folder), generate the
candidate on its smoke set (as a CPU run does; sizes are read at run time), then build Model and
ModelNew at the problem's own constructor and inputs on the GPU, fp32 without TF32 (the cases'
`strict` precision), and report the worst error relative to the output's largest magnitude and
both forwards' times (CUDA events, median of 50 after 10 warm-ups) with the convolution's
TFLOP/s. First run 2026-11-27 on an H200 (BENCHMARKS.md): 50 and 54 exact, 0.35x and 0.27x of
cuDNN at the template's untuned defaults; give it convolution problems only (another problem's
row says "failed").
"""

from __future__ import annotations

import importlib.util
import sys
import tempfile
from pathlib import Path

import torch
from conv_layout_gpu import ms  # beside this script: CUDA events, median after warm-ups


def load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def conv_flops(model: torch.nn.Module, x: torch.Tensor) -> float:
    """2 x multiply-adds of the model's one convolution at input x."""
    conv = next((m for m in model.modules() if isinstance(m, torch.nn.modules.conv._ConvNd)), None)
    if conv is None:
        raise ValueError("not a convolution problem (the model has no nn.Conv*)")
    w = conv.weight
    taps = w[0, 0].numel()
    if conv.transposed:
        return 2.0 * x.numel() * w.shape[1] * taps
    with torch.no_grad():
        out = conv(x)
    return 2.0 * out.numel() * w.shape[1] * taps


def row(file: Path, tmp: Path) -> str:
    """One problem's table row."""
    from kopt.harness.case import load_case_dir
    from kopt.harness.kernelbench import import_kernelbench
    from kopt.phases.engineers.offline import generate_candidate

    case = load_case_dir(import_kernelbench(file, out=tmp / file.stem))
    result = generate_candidate(case, input_set="smoke")
    cand_file = tmp / f"{file.stem}_candidate.py"
    cand_file.write_text(result.source)
    problem, cand = load(file, f"p_{file.stem}"), load(cand_file, f"c_{file.stem}")
    torch.manual_seed(0)
    ref = problem.Model(*problem.get_init_inputs()).cuda()
    new = cand.ModelNew(*problem.get_init_inputs()).cuda()
    new.load_state_dict(ref.state_dict())
    inputs = [t.cuda() if isinstance(t, torch.Tensor) else t for t in problem.get_inputs()]
    with torch.no_grad():
        want, got = ref(*inputs).double(), new(*inputs).double()
        err = ((got - want).abs().max() / want.abs().max().clamp_min(1e-30)).item()
        eager, triton = ms(lambda: ref(*inputs)), ms(lambda: new(*inputs))
    tflops = conv_flops(ref, inputs[0]) / triton / 1e9
    kinds = "+".join(k["kind"] for k in result.kernels)
    return (f"| {file.stem[:40]} | {kinds} | {err:.1e} | {eager:.3f} | {triton:.3f} | "
            f"{eager / triton:.2f}x | {tflops:.1f} |")


def main() -> None:
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}")
    print("| problem | kernels | max rel err | cuDNN ms | Triton ms | vs cuDNN | Triton TFLOP/s |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    tmp = Path(tempfile.mkdtemp())
    for arg in sys.argv[1:]:
        file = Path(arg)
        try:
            print(row(file, tmp), flush=True)
        except Exception as err:  # one problem's failure is its row
            print(f"| {file.stem[:40]} | failed: {type(err).__name__}: {str(err)[:200]} |",
                  flush=True)
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
