"""`run_pipeline(..., engineer="anthropic", analyst="anthropic")` against the fake API.

The pipeline's harness fakes (tests/test_pipeline_fakes.py) stand in for timing and
verification so the whole run (architect -> integrator) stays fast; the engineer, its tools,
the analyst, transcripts and git are real.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path

import pytest
from fake_anthropic_server import FakeAnthropic, message, text, tool_use
from test_anthropic import CASE, KERNEL, last_tool_results

from kopt.phases.engineers.transcript import read_transcript
from kopt.phases.events import TEXT_DELTA, TOOL_CALL, USAGE, Event
from kopt.phases.history import init_workspace

pipeline = pytest.importorskip("kopt.phases.pipeline")
pipeline_fakes = pytest.importorskip("test_pipeline_fakes")

PLAN = {"summary": "fuse LayerNorm and GELU", "target_speedup": 1.5,
        "targets": [{"rank": 1, "region": "layer_norm+gelu", "ops": ["layer_norm", "gelu"],
                     "fusion": "one row kernel", "expected_gain_ms": 1.0}]}


def script(seen: list[str]) -> list:
    good = pipeline_fakes.GOOD_KERNEL.format(ms=0.5)  # the fake timer reads 0.5 ms: 4x
    broken = pipeline_fakes.BROKEN_KERNEL

    def after_rejection(body: dict) -> dict:
        seen.append(last_tool_results(body)[0]["content"])
        return message(text("Half the output was never written; fixing the grid."),
                       tool_use("write_file", {"file_path": KERNEL, "content": good}))

    return [
        message(text(json.dumps(PLAN))),                        # the Strategy Analyst
        message(text("Writing the fused kernel."),
                tool_use("write_file", {"file_path": KERNEL, "content": broken})),
        message(tool_use("verification_tool", {"candidate_path": KERNEL})),
        after_rejection,
        message(tool_use("verification_tool", {"candidate_path": KERNEL})),
    ]


def test_the_pipeline_runs_with_the_anthropic_engineer_and_analyst(workspace, monkeypatch):
    key = "sk-ant-api03-PIPELINE-" + uuid.uuid4().hex
    init_workspace(workspace)
    seen: list[str] = []
    events: list[Event] = []
    with FakeAnthropic(script(seen)) as server:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
        monkeypatch.setenv("ANTHROPIC_API_KEY", key)
        fakes = pipeline_fakes.fakes()
        fakes.pop("engineer_factory")  # the real engineer registry: make_engineer("anthropic")
        result = pipeline.run_pipeline(
            CASE, engineer="anthropic", analyst="anthropic", iterations=1, root=workspace,
            events=events.append, fakes=fakes,
            engineer_options={"starting_point": False, "model": "claude-opus-5-5"})
    assert server.remaining == 0
    # --model reaches both agents' requests.
    assert {r.body["model"] for r in server.requests} == {"claude-opus-5-5"}

    data = result.to_dict() if hasattr(result, "to_dict") else vars(result)
    assert data["verified"] is True
    run_dir = workspace / "manifests" / data["run_id"]
    architect = json.loads((run_dir / "architect.json").read_text())
    assert architect["details"]["plan"]["targets"] == PLAN["targets"]
    assert architect["details"]["plan"]["analyst"] == "anthropic"
    # The engineer read the verifier's report of the broken kernel, then fixed it.
    assert "REJECTED" in seen[0] and "312 of 16384 elements never written" in seen[0]
    log = subprocess.run(["git", "log", "--format=%s", data["branch"]], cwd=workspace,
                         capture_output=True, text=True, check=True).stdout
    assert "iter 1" in log and "iter 2" in log
    # Events streamed through the pipeline's sink.
    kinds = {e.kind for e in events}
    assert {TEXT_DELTA, TOOL_CALL, USAGE} <= kinds
    # Transcripts of both agents are in the run, complete.
    optimizer = read_transcript(run_dir / "transcripts" / "optimizer.jsonl")
    assert [r["kind"] for r in optimizer].count("response") == 4
    assert read_transcript(run_dir / "transcripts" / "analyst.jsonl")[-1]["reason"] == "valid plan"
    archived = list((workspace / "archive").rglob("optimizer.jsonl"))
    assert archived and archived[0].read_text() == (run_dir / "transcripts/optimizer.jsonl"
                                                    ).read_text()
    # No trace of the key anywhere in the workbench (run, archive, worktree) or its history.
    for file in workspace.rglob("*"):
        if file.is_file() and ".git" not in file.parts:
            assert key.encode() not in file.read_bytes(), file
    history = subprocess.run(["git", "log", "-p", "--all"], cwd=workspace, capture_output=True,
                             text=True, check=True).stdout
    assert key not in history

    # `--engineer replay:RUN_DIR`, offline: the same kernels are committed in the same order.
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:9")
    fakes = pipeline_fakes.fakes()
    fakes.pop("engineer_factory")
    replayed = pipeline.run_pipeline(CASE, engineer=f"replay:{run_dir}", iterations=1,
                                     root=workspace, fakes=fakes)
    replay_data = replayed.to_dict() if hasattr(replayed, "to_dict") else vars(replayed)
    assert replay_data["verified"] is True
    live_blobs = kernel_blobs(workspace, data["branch"])
    assert len(live_blobs) == 2 and live_blobs[0] != live_blobs[1]  # broken, then fixed
    assert kernel_blobs(workspace, replay_data["branch"]) == live_blobs


def kernel_blobs(root: Path, branch: str) -> list[str]:
    """The optimizer's kernel blob at each of its iteration commits, oldest first."""
    out = subprocess.run(["git", "log", "--reverse", "--format=%H %s", branch], cwd=root,
                         capture_output=True, text=True, check=True).stdout.splitlines()
    shas = [line.split()[0] for line in out if line.split()[1] == "optimizer:"]
    return [subprocess.run(["git", "rev-parse", f"{sha}:{KERNEL}"], cwd=root,
                           capture_output=True, text=True, check=True).stdout.strip()
            for sha in shas]
