"""Strict float32 products on tensor cores: the matmul and convolution templates with
`tl.dot(..., input_precision="ieee")` (FMA units) against "tf32x3" (three TF32 products of
split operands), beside cuBLAS / cuDNN strict float32 (eager) and torch.compile.

    python benchmarks/f32_dot_gpu.py FILE.py ...

Per KernelBench problem, at the case's precision (strict: TF32 off, as the harness times it):
the candidate generated with each `STRICT_FLOAT32_DOT`, every product on the Triton template
(`library_product` patched off) and as generated (strict float32 products default to cuBLAS);
each one's median forward (CUDA events) and its largest error against a float64 forward of
the same weights and inputs, relative to that output's largest magnitude (eager's error on
the same scale beside it). Timing and error only: the suite's verifier judges candidates.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import torch
from conv_layout_gpu import ms  # beside this script: CUDA events, median after warm-ups
from profile_kb_gpu import _load

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _error(got, want) -> float:  # type: ignore[no-untyped-def]
    got = got if isinstance(got, (tuple, list)) else [got]
    want = want if isinstance(want, (tuple, list)) else [want]
    return max(float((g.double() - w).abs().max() / w.abs().max().clamp_min(1e-30))
               for g, w in zip(got, want, strict=True))


def main() -> None:
    from kopt.harness.case import load_case_dir
    from kopt.harness.data import agent_provide_inputs, build_model
    from kopt.harness.kernelbench import import_kernelbench
    from kopt.harness.verification.guards import set_precision
    from kopt.phases.engineers.offline import fusion, generate_candidate
    from kopt.phases.engineers.offline.kernels import matmul, writer

    work = Path(tempfile.mkdtemp())
    rows = []
    library_product = fusion.library_product
    for f in sys.argv[1:]:
        p = Path(f)
        case = load_case_dir(import_kernelbench(p, name=f"p{p.stem.split('_')[0]}", out=work / p.stem))
        set_precision(case.manifest.precision)
        ref = build_model(case, "main").cuda()
        inputs = agent_provide_inputs(case, "main", 1, device="cuda")
        args, kwargs = inputs.args, inputs.kwargs
        with torch.no_grad():
            truth_model = build_model(case, "main").cuda().double()
            truth = truth_model(*[a.double() if torch.is_tensor(a) and a.is_floating_point() else a
                                  for a in args], **kwargs)
            del truth_model
            truth = [t.double() for t in (truth if isinstance(truth, (tuple, list)) else [truth])]
            times = {"eager": ms(lambda: ref(*args, **kwargs))}
            errors = {"eager": _error(ref(*args, **kwargs), truth)}
            comp = torch.compile(ref)
            times["compile"] = ms(lambda: comp(*args, **kwargs))
            for dot in ("ieee", "tf32x3"):
                for forced in (True, False):
                    writer.STRICT_FLOAT32_DOT = dot
                    patched = (lambda mm, precision="strict": False) if forced else library_product
                    fusion.library_product = matmul.library_product = patched
                    try:
                        source = generate_candidate(case).source
                    except Exception as err:  # noqa: BLE001 - a row says why
                        print(f"{p.stem} {dot} forced={forced}: {type(err).__name__}: {err}")
                        continue
                    finally:
                        fusion.library_product = matmul.library_product = library_product
                    name = f"{dot}{' template' if forced else ''}"
                    cand = work / f"{p.stem}_{dot}_{int(forced)}.py"
                    cand.write_text(source)
                    new = build_model(case, "main", cls=_load(cand).ModelNew).cuda()
                    errors[name] = _error(new(*args, **kwargs), truth)
                    times[name] = ms(lambda new=new: new(*args, **kwargs))
                    del new
        line = " | ".join(f"{k} {times[k]:.3f} ms" + (f" (err {errors[k]:.1e})" if k in errors else "")
                          for k in times)
        print(f"{p.stem}: {line}", flush=True)
        rows.append((p.stem, times, errors))
        torch._dynamo.reset()
        torch.cuda.empty_cache()
    names = ["eager", "compile", "ieee template", "tf32x3 template", "ieee", "tf32x3"]
    print("\n| problem | " + " | ".join(names) + " | tf32x3 template vs eager |")
    print("|---|" + "---:|" * (len(names) + 1))
    for stem, times, errors in rows:
        cells = [f"{times[n]:.3f}" + (f" ({errors[n]:.0e})" if n in errors else "") if n in times else "-"
                 for n in names]
        best = times.get("tf32x3 template")
        ratio = f"{times['eager'] / best:.2f}x" if best else "-"
        print(f"| {stem[:40]} | " + " | ".join(cells) + f" | {ratio} |")


if __name__ == "__main__":
    main()
