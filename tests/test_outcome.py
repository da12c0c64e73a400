"""Never regress: a run ends with a faster kernel, or says what to keep (issue 19.4).

The pipeline runs on the harness fakes (test_pipeline_fakes.py): once as on the CPU (the
interpreter measures no speed) and once with a faked GPU timer (`cuda-events` timings, eager
2.0 ms, torch.compile 1.6 ms, the kernel whatever its `fake_ms` marker says).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from test_pipeline_fakes import GOOD_KERNEL, FakeEngineer, fakes, gpu_fakes

from kopt.harness.speedup import format_speedup, speedup_slug
from kopt.phases import history
from kopt.phases.engineers.base import Proposal
from kopt.phases.manifest import read_manifest, validation_errors
from kopt.phases.outcome import decide
from kopt.phases.pipeline import run_pipeline

ROOT = Path(__file__).resolve().parent.parent


def _lat(ms: float, spread: float = 0.01) -> dict[str, float]:
    return {"median": ms, "p20": ms * (1 - spread), "p80": ms * (1 + spread)}


@pytest.mark.parametrize(("value", "text"), [
    (2.5678, "2.57x"), (0.834, "0.83x"), (12.44, "12.4x"), (123.4, "123x"),
    (0.00013, "0.00013x"), (None, "—")])
def test_one_formatter_writes_three_significant_digits(value: float | None, text: str) -> None:
    assert format_speedup(value) == text
    assert format_speedup(value, "cpu-interpreter") == "—"
    assert speedup_slug(value, "cpu-interpreter") == "cpu-verified"


def test_outcome_rules() -> None:
    gpu = "cuda-events"
    faster = decide(verified=True, timing_label=gpu, eager=_lat(2.0), compiled=_lat(1.6),
                    candidate=_lat(0.5))
    assert faster.verdict == "faster" and faster.summary == "4.00x vs eager, 3.20x vs torch.compile"
    within_noise = decide(verified=True, timing_label=gpu, eager=_lat(2.0), compiled=None,
                          candidate=_lat(1.98))
    assert within_noise.verdict == "keep-pytorch"
    assert within_noise.summary.startswith("no speedup: keep PyTorch (1.01x vs eager)")
    # a noisy timer widens the band: 10% faster inside a +-15% spread is no speedup
    noisy = decide(verified=True, timing_label=gpu, eager=_lat(2.0, 0.15), compiled=None,
                   candidate=_lat(1.8))
    assert noisy.verdict == "keep-pytorch" and noisy.noise == pytest.approx(0.15)
    slower = decide(verified=True, timing_label=gpu, eager=_lat(2.0), compiled=_lat(1.6),
                    candidate=_lat(3.0))
    assert slower.verdict == "keep-pytorch" and "0.67x vs eager" in slower.summary
    # each comparison allows for its own two timings' noise: a disturbed eager row (+-30%)
    # does not hide a 1.16x lead over a steady torch.compile, and still blocks nothing it beats
    noisy_eager = decide(verified=True, timing_label=gpu, eager=_lat(26.4, 0.30),
                         compiled=_lat(11.5), candidate=_lat(9.9))
    assert noisy_eager.verdict == "faster", noisy_eager
    assert noisy_eager.noise == pytest.approx(0.30)
    near_compile = decide(verified=True, timing_label=gpu, eager=_lat(26.4),
                          compiled=_lat(10.4, 0.10), candidate=_lat(9.9))
    assert near_compile.verdict == "keep-compile", near_compile  # 1.05x inside compile's +-10%
    compile_wins = decide(verified=True, timing_label=gpu, eager=_lat(2.0), compiled=_lat(1.6),
                          candidate=_lat(1.7))
    assert compile_wins.verdict == "keep-compile"
    assert compile_wins.summary.endswith("keep torch.compile")
    cpu = decide(verified=True, timing_label="cpu-interpreter", eager=_lat(0.03),
                 compiled=_lat(0.1), candidate=_lat(1400.0))
    assert (cpu.verdict, cpu.summary) == ("cpu-verified",
                                          "verified (CPU interpreter: no speed measured)")
    assert decide(verified=False, timing_label=gpu, eager=_lat(2.0), compiled=None,
                  candidate=_lat(0.5)).verdict == "not-verified"


def _engineer(ms_by_round: dict[int, float]) -> type[FakeEngineer]:
    class Timed(FakeEngineer):
        def propose(self, request, events):  # type: ignore[no-untyped-def]
            out = request.worktree / "kernels" / f"{request.case.name}.py"
            out.parent.mkdir(exist_ok=True)
            out.write_text(GOOD_KERNEL.format(ms=ms_by_round[request.iteration]).replace(
                "KOPT_TUNABLES", f"ROUND = {request.iteration}\nKOPT_TUNABLES"))
            return Proposal(candidate=f"kernels/{request.case.name}.py", notes="timed")
    return Timed


@pytest.fixture
def repo(workspace: Path) -> Path:
    history.init_workspace(workspace)
    return workspace


def test_a_kernel_slower_than_eager_ends_no_speedup_keep_pytorch(
        repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # BLOCK_ROWS tuning gains at most 1.3x: 4.0 ms stays slower than eager's 2.0 ms
    f = gpu_fakes(monkeypatch, engineer=_engineer({1: 4.0, 2: 5.0}))
    result = run_pipeline("layernorm_gelu", iterations=2, run_id="r1", fakes=f)
    assert result.verified and result.timing_label == "cuda-events"
    assert result.outcome["verdict"] == "keep-pytorch"
    assert result.outcome["summary"].startswith("no speedup: keep PyTorch (")
    assert result.speedup_vs_eager < 1.0
    final = read_manifest(repo / "manifests/r1/integrator.json")
    assert validation_errors(final.to_dict()) == []
    assert final.details["outcome"]["verdict"] == "keep-pytorch"
    # the optimizer's result is its fastest verified iteration (round 1), not the last
    opt = read_manifest(repo / "manifests/r1/optimizer.json")
    assert opt.details["best"]["iteration"] == 1
    assert "no speedup: keep PyTorch" in (repo / final.details["report"]).read_text()
    name = Path(result.archive).name
    assert "-layernorm_gelu-keep-pytorch-" in name and name.endswith("x")
    out = subprocess.run([sys.executable, "-m", "kopt", "history", "layernorm_gelu"], cwd=repo,
                         env={**os.environ, "KOPT_HOME": str(repo), "PYTHONPATH": str(ROOT),
                              "COLUMNS": "200"},
                         capture_output=True, text=True, timeout=120)
    assert "no speedup: keep PyTorch" in out.stdout, out.stdout + out.stderr


def test_faster_than_eager_but_not_torch_compile_says_keep_torch_compile(
        repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    f = gpu_fakes(monkeypatch, engineer=_engineer({1: 2.3}))  # tuned: 2.3 / 1.3 = 1.77 ms
    result = run_pipeline("layernorm_gelu", iterations=1, run_id="r1", fakes=f)
    assert result.outcome["verdict"] == "keep-compile"
    assert result.outcome["summary"].endswith("keep torch.compile")
    assert "-keep-compile-" in Path(result.archive).name


def test_a_faster_kernel_keeps_the_archive_layout(repo: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    f = gpu_fakes(monkeypatch, engineer=_engineer({1: 0.65}))  # tuned: 0.5 ms
    result = run_pipeline("layernorm_gelu", iterations=1, run_id="r1", fakes=f)
    assert result.outcome["verdict"] == "faster"
    assert result.outcome["summary"] == "4.00x vs eager, 3.20x vs torch.compile"
    assert Path(result.archive).name.endswith("-layernorm_gelu-4.00x")


def test_a_cpu_run_shows_no_speedup_figure(repo: Path) -> None:
    result = run_pipeline("layernorm_gelu", iterations=2, run_id="r1", fakes=fakes())
    assert result.outcome["verdict"] == "cpu-verified"
    assert result.speedup_vs_eager is None
    assert Path(result.archive).name.endswith("-layernorm_gelu-cpu-verified")
    best = history.get_run("r1").best_speedup
    assert best is not None and format_speedup(best) == "—"  # the TUI's data layer


def _kopt(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kopt", *args], cwd=repo,
                          env={**os.environ, "KOPT_HOME": str(repo), "PYTHONPATH": str(ROOT)},
                          capture_output=True, text=True, timeout=120)


def test_approve_refuses_a_slower_than_eager_kernel_without_force(
        repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    f: dict[str, Any] = gpu_fakes(monkeypatch, engineer=_engineer({1: 4.0}))
    run_pipeline("layernorm_gelu", iterations=1, run_id="r1", fakes=f)
    refused = _kopt(repo, "approve", "r1")
    assert refused.returncode == 1, refused.stdout + refused.stderr
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1 and "--force" in lines[0] and "slower" in lines[0]
    assert history.get_run("r1").approval["state"] == "pending"
    forced = _kopt(repo, "approve", "r1", "--force")
    assert forced.returncode == 0, forced.stderr
    assert history.get_run("r1").approval["state"] == "approved"


def test_approve_of_a_cpu_run_needs_no_force(repo: Path) -> None:
    run_pipeline("layernorm_gelu", iterations=2, run_id="r1", fakes=fakes())
    done = _kopt(repo, "approve", "r1")
    assert done.returncode == 0, done.stderr


def test_the_tui_run_data_says_the_outcome_and_shows_no_interpreter_figure(repo: Path) -> None:
    import threading

    from kopt.harness.speedup import Speedup
    from kopt.workbench.backend import Backend, RunRequest
    from kopt.workbench.backend import format_speedup as tui_format

    backend = Backend(pipeline_options={"fakes": fakes()}, in_process=True)
    done = backend.run_pipeline(RunRequest("layernorm_gelu", iterations=2), events=lambda e: None,
                                cancel=threading.Event())
    assert done.status == "verified (CPU interpreter: no speed measured)"
    assert tui_format(Speedup(0.00013, "cpu-interpreter")) == "—"
    assert tui_format(0.834) == "0.83x" and tui_format(None) == "—"
