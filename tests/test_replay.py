"""`--engineer replay:PATH`: a recorded conversation reproduces the same commits, offline."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import test_anthropic
from test_anthropic import (
    CASE,
    GOOD_KERNEL,
    KERNEL,
    Recorder,
    make_request,
    wrong_then_right_script,
)

from kopt.harness.errors import BadInputError
from kopt.phases.engineers.base import make_engineer
from kopt.phases.engineers.transcript import read_transcript
from kopt.phases.events import TEXT_DELTA, TOOL_CALL

api = test_anthropic.api  # the fake-server fixture, shared

BUNDLED = Path(__file__).parent / "transcripts" / f"{CASE}-wrong-then-right.jsonl"


def record_run(workspace: Path, api) -> tuple[Path, list[str], list[str]]:
    """A live run against the fake server: (transcript, commit subjects, kernel blobs)."""
    api(wrong_then_right_script([]))
    request, toolbox = make_request(workspace, name="live")
    proposal = make_engineer("anthropic").propose(request, Recorder())
    assert proposal.verified is not None and proposal.verified.accepted
    return Path(proposal.transcript), toolbox.commits(), toolbox.kernel_blobs()


def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any attempt to reach an API would fail: no key, and a base URL nobody listens on."""
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:9")


def test_replay_reproduces_the_same_commits_without_network(workspace, api, monkeypatch):
    transcript, live_commits, live_blobs = record_run(workspace, api)
    no_network(monkeypatch)
    request, toolbox = make_request(workspace, name="replayed")
    events = Recorder()
    proposal = make_engineer(f"replay:{transcript}").propose(request, events)

    assert toolbox.commits() == live_commits
    assert toolbox.kernel_blobs() == live_blobs  # byte-identical kernels at each commit
    assert proposal.candidate == KERNEL and proposal.verified.accepted
    assert proposal.usage["cost_usd"] == 0  # nothing was spent
    assert "".join(e.message for e in events.kinds(TEXT_DELTA)).startswith("Let me look")
    assert len(events.kinds(TOOL_CALL)) == 6
    # The replay keeps its own transcript, itself replayable.
    replayed = read_transcript(Path(proposal.transcript))
    assert [r["kind"] for r in replayed].count("response") == 6


def test_replay_accepts_a_run_folder_and_replays_session_by_session(workspace, api,
                                                                    monkeypatch):
    transcript, _, _ = record_run(workspace, api)
    run_dir = transcript.parent.parent  # manifests/<run>/ holding transcripts/optimizer.jsonl
    no_network(monkeypatch)
    engineer = make_engineer(f"replay:{run_dir}")
    request, _ = make_request(workspace, name="replayed")
    assert engineer.propose(request, Recorder()).verified.accepted
    # The recording had one session: a second iteration has nothing to replay.
    request.iteration = 2
    second = engineer.propose(request, Recorder())
    assert second.candidate is None and "no session for iteration 2" in second.notes


def test_bundled_demo_transcript_replays(workspace, monkeypatch):
    no_network(monkeypatch)
    request, toolbox = make_request(workspace, name="demo")
    proposal = make_engineer(f"replay:{BUNDLED}").propose(request, Recorder())
    assert toolbox.commits()[1:] == [f"optimizer: {CASE} iter 1 - rejected",
                                      f"optimizer: {CASE} iter 2 - verified"]
    assert (toolbox.worktree / KERNEL).read_text() == GOOD_KERNEL
    assert proposal.verified.accepted


def test_replay_errors_are_one_line(workspace, tmp_path):
    with pytest.raises(BadInputError, match="needs a transcript"):
        make_engineer("replay")
    with pytest.raises(BadInputError, match="no transcript at"):
        make_engineer(f"replay:{tmp_path / 'missing.jsonl'}")
    empty = tmp_path / "empty.jsonl"
    empty.write_text(json.dumps({"kind": "request"}) + "\n")
    with pytest.raises(BadInputError, match="no recorded session"):
        make_engineer(f"replay:{empty}")
    torn = tmp_path / "torn.jsonl"
    shutil.copy(BUNDLED, torn)
    with torn.open("a") as fh:
        fh.write('{"kind": "respo')  # a run killed mid-write
    assert make_engineer(f"replay:{torn}").sessions  # the torn last line is skipped


def test_a_resumed_run_replays_the_session_of_its_iteration(workspace, api, monkeypatch):
    from fake_anthropic_server import message, tool_use

    api([message(tool_use("write_file", {"file_path": KERNEL, "content": GOOD_KERNEL.replace(
             "h = diff * rstd * w + b", "h = diff * rstd * w")}),
             tool_use("verification_tool", {"candidate_path": KERNEL})),
         message(tool_use("write_file", {"file_path": KERNEL, "content": GOOD_KERNEL}),
                 tool_use("verification_tool", {"candidate_path": KERNEL}))])
    engineer = make_engineer("anthropic", {"max_verifications": 1})
    request, _ = make_request(workspace, name="live")
    assert not engineer.propose(request, Recorder()).verified.accepted
    request.iteration = 2
    assert engineer.propose(request, Recorder()).verified.accepted

    no_network(monkeypatch)
    resumed, toolbox = make_request(workspace, name="resumed", iteration=2)
    proposal = make_engineer(f"replay:{request.run_dir}").propose(resumed, Recorder())
    assert proposal.verified.accepted  # iteration 2's session, not the first one
    assert toolbox.commits()[1:] == [f"optimizer: {CASE} iter 1 - verified"]
