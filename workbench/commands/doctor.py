"""`kopt doctor`: is this machine ready? Versions, GPU and its ceilings, the interpreter, git,
the API key (set or not, never its value), the candidate sandbox (each layer enforced or not,
and why), each with the fix for anything missing.

Exit 0 when everything kopt needs works (a missing GPU or API key is a warning: kopt then
runs on the CPU interpreter with the offline engineer), 1 when something it needs fails.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from rich.table import Table

from kopt.workbench.output import console, print_json_line

MIN_PYTHON = (3, 11)
# The interpreter check compiles nothing but imports torch+triton: 60 s covers a cold disk.
INTERPRETER_TIMEOUT_S = 60
INTERPRETER_PROBE = '''
import torch
import triton
import triton.language as tl


@triton.jit
def _add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x + y, mask=mask)


x = torch.arange(100, dtype=torch.float32)
y = torch.full((100,), 0.5)
out = torch.empty(100)
_add_kernel[(4,)](x, y, out, 100, BLOCK=32)
assert torch.equal(out, x + y), "wrong result"
print("kopt-interpreter-ok")
'''


@dataclass
class Finding:
    """One line of the doctor's report."""

    name: str
    status: Literal["ok", "warn", "fail"]
    detail: str
    fix: str = ""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("doctor", help="check Python, torch, triton, the GPU, git, the API key and the sandbox")
    p.add_argument("--json", action="store_true", help="print a JSON object as the last line")
    p.add_argument("--no-ceilings", action="store_true",
                   help="skip measuring the GPU's ceilings (a few seconds, once per GPU)")
    p.set_defaults(func=handle)


def check_python() -> Finding:
    version = ".".join(map(str, sys.version_info[:3]))
    if sys.version_info[:2] >= MIN_PYTHON:
        return Finding("python", "ok", version)
    return Finding("python", "fail", f"{version} is too old",
                   fix=f"use Python >= {'.'.join(map(str, MIN_PYTHON))}")


def check_torch() -> Finding:
    try:
        import torch
    except Exception as err:
        return Finding("torch", "fail", f"cannot import: {type(err).__name__}: {err}",
                       fix="pip install torch (README.md: CPU or CUDA build)")
    build = f"CUDA {torch.version.cuda}" if torch.version.cuda else "CPU build"
    return Finding("torch", "ok", f"{torch.__version__} ({build})")


def check_triton() -> Finding:
    try:
        import triton
    except Exception as err:
        return Finding("triton", "fail", f"cannot import: {type(err).__name__}: {err}",
                       fix="pip install triton")
    return Finding("triton", "ok", triton.__version__)


def check_gpu(measure_ceilings: bool) -> tuple[Finding, dict[str, Any] | None]:
    import torch

    if not torch.cuda.is_available():
        why = ("this torch is a CPU build" if not torch.version.cuda
               else "torch sees no CUDA device")
        return (Finding("gpu", "warn", f"none ({why}): cases run on the Triton interpreter on "
                        "their smoke inputs, timings labelled cpu-interpreter",
                        fix="on a GPU machine install a CUDA build of torch (README.md)"), None)
    props = torch.cuda.get_device_properties(0)
    detail = f"{props.name}, {props.total_memory / 2**30:.0f} GiB, sm_{props.major}{props.minor}"
    if not measure_ceilings:
        return Finding("gpu", "ok", detail + " (ceilings not measured)"), None
    from kopt.harness.roofline import ceilings

    try:
        ceil = ceilings("cuda")
    except Exception as err:
        return (Finding("gpu", "fail", f"{detail}; measuring ceilings failed: "
                        f"{type(err).__name__}: {err}",
                        fix="check the driver with nvidia-smi; is the GPU busy or faulted?"), None)
    detail += (f"; copy {ceil.copy_gbps:.0f} GB/s, bf16 {ceil.bf16_tflops:.0f}, "
               f"fp16 {ceil.fp16_tflops:.0f}, tf32 {ceil.tf32_tflops:.0f}, "
               f"fp32 {ceil.fp32_tflops:.0f} TFLOP/s")
    return Finding("gpu", "ok", detail), ceil.to_dict()


def check_interpreter() -> Finding:
    """Run a tiny @triton.jit kernel under TRITON_INTERPRET=1 in a fresh process."""
    with tempfile.TemporaryDirectory(prefix="kopt-doctor-") as tmp:
        probe = Path(tmp) / "probe.py"  # @triton.jit reads its source: it needs a real file
        probe.write_text(INTERPRETER_PROBE)
        env = {**os.environ, "TRITON_INTERPRET": "1"}
        env.pop("ANTHROPIC_API_KEY", None)
        try:
            done = subprocess.run([sys.executable, str(probe)], capture_output=True, text=True,
                                  env=env, timeout=INTERPRETER_TIMEOUT_S, cwd=tmp)
        except subprocess.TimeoutExpired:
            return Finding("interpreter", "fail",
                           f"a tiny kernel did not finish in {INTERPRETER_TIMEOUT_S} s",
                           fix="reinstall triton; check `TRITON_INTERPRET=1 python` by hand")
    if done.returncode == 0 and "kopt-interpreter-ok" in done.stdout:
        return Finding("interpreter", "ok", "TRITON_INTERPRET=1 runs @triton.jit kernels on the CPU")
    last = (done.stderr.strip().splitlines() or done.stdout.strip().splitlines() or ["no output"])[-1]
    return Finding("interpreter", "fail", f"a tiny kernel failed under TRITON_INTERPRET=1: {last}",
                   fix="pip install -U triton (>= 3.0 ships the interpreter)")


def check_git() -> Finding:
    try:
        done = subprocess.run(["git", "--version"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return Finding("git", "fail", "git is not installed or not on PATH",
                       fix="install git (runs are git branches and worktrees)")
    version = done.stdout.strip().removeprefix("git version ")
    from kopt.harness.paths import workspace_root

    root = workspace_root()
    inside = subprocess.run(["git", "-C", str(root), "rev-parse", "--is-inside-work-tree"],
                            capture_output=True, text=True, timeout=10)
    if inside.returncode != 0 or inside.stdout.strip() != "true":
        return Finding("git", "warn", f"{version}; {root} is not a git repository",
                       fix=f"run `git init` in {root} (or `kopt init`) before `kopt run`")
    return Finding("git", "ok", f"{version}; workspace {root} is a git repository")


def check_api_key() -> Finding:
    if os.environ.get("ANTHROPIC_API_KEY"):
        return Finding("api key", "ok", "ANTHROPIC_API_KEY is set (the anthropic engineer can run)")
    return Finding("api key", "warn", "ANTHROPIC_API_KEY is not set: runs use the offline engineer",
                   fix="export ANTHROPIC_API_KEY=... to use the anthropic engineer")


def check_sandbox() -> list[Finding]:
    """The candidate sandbox (harness.sandbox): its mechanism, then each layer, enforced or
    not and why, confirmed by trying each way out from inside it."""
    from kopt.harness import sandbox

    state = sandbox.probe()
    if not state.enabled:
        return [Finding("sandbox", "warn", state.summary(), fix="unset KOPT_SANDBOX")]
    got_through = sandbox.self_test() if state.mechanism != "none" else {}
    findings = [Finding("sandbox", "ok" if state.complete else "warn",
                        state.summary() + (f" ({state.reason})" if state.reason else ""),
                        fix=state.fix)]
    for layer in state.layers:
        escaped = got_through.get(layer.name)
        if escaped and layer.enforced:
            findings.append(Finding(f"sandbox {layer.name}", "fail",
                                    f"claimed enforced, but a probe {escaped}",
                                    fix="report this; run with --no-sandbox meanwhile"))
            continue
        tested = layer.enforced and layer.name in got_through
        findings.append(Finding(f"sandbox {layer.name}", "ok" if layer.enforced else "warn",
                                layer.detail + (" (tried from inside: blocked)" if tested else ""),
                                fix=layer.fix))
    return findings


def diagnose(*, measure_ceilings: bool = True) -> tuple[list[Finding], dict[str, Any] | None]:
    """Every finding, and the GPU's ceilings when measured."""
    findings = [check_python(), check_torch(), check_triton()]
    ceilings: dict[str, Any] | None = None
    if findings[1].status == "ok":
        gpu, ceilings = check_gpu(measure_ceilings)
        findings.append(gpu)
    if findings[2].status == "ok":
        findings.append(check_interpreter())
    findings += [check_git(), check_api_key(), *check_sandbox()]
    return findings, ceilings


def handle(args: argparse.Namespace) -> int:
    findings, ceilings = diagnose(measure_ceilings=not args.no_ceilings)
    ok = all(f.status != "fail" for f in findings)
    if args.json:
        from kopt.harness import sandbox
        from kopt.harness.environment import describe_environment

        print_json_line({"ok": ok, "checks": [asdict(f) for f in findings],
                         "sandbox": sandbox.probe().to_dict(),
                         "ceilings": ceilings, "environment": describe_environment()})
        return 0 if ok else 1
    table = Table(title="kopt doctor")
    table.add_column("check")
    table.add_column("")
    table.add_column("detail", overflow="fold")
    table.add_column("fix", overflow="fold")
    marks = {"ok": "[green]ok[/green]", "warn": "[yellow]warn[/yellow]", "fail": "[red]FAIL[/red]"}
    for f in findings:
        table.add_row(f.name, marks[f.status], f.detail, f.fix)
    console.print(table)
    return 0 if ok else 1
