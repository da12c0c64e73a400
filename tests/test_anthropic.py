"""The `anthropic` engineer end to end against a local fake of the Messages API.

The optimizer loop is driven through a test Toolbox whose `verify` checks the candidate and
commits it into a temporary git worktree (one commit per verified candidate), so the git
history and the transcript of a run can be checked like a user would.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest
import torch
from fake_anthropic_server import (
    DropReply,
    ErrorReply,
    FakeAnthropic,
    message,
    text,
    tool_use,
)

from kopt.harness.case import Case, load_case
from kopt.harness.errors import EngineerError
from kopt.phases.engineers.base import EngineerRequest, Toolbox, VerifyResult, make_engineer
from kopt.phases.engineers.llm_client import StreamLostError
from kopt.phases.engineers.transcript import read_transcript
from kopt.phases.events import TEXT_DELTA, TOOL_CALL, TOOL_RESULT, USAGE, Event

CASE = "layernorm_gelu"
KERNEL = f"kernels/{CASE}.py"

GOOD_KERNEL = '''\
"""LayerNorm + exact GELU fused in one Triton kernel (one program per row)."""

import torch
import torch.nn as nn
import triton
import triton.language as tl

# One row per program: rows up to this many columns fit in registers.
MAX_COLS = 65536


@triton.jit
def _layernorm_gelu_kernel(
    x_ptr,  # (rows, cols)
    w_ptr,  # (cols,)
    b_ptr,  # (cols,)
    y_ptr,  # (rows, cols)
    n_cols,
    eps,
    BLOCK_SIZE: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / n_cols
    diff = tl.where(mask, x - mean, 0.0)
    var = tl.sum(diff * diff, axis=0) / n_cols
    rstd = 1.0 / tl.sqrt(var + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    h = diff * rstd * w + b
    y = 0.5 * h * (1.0 + tl.math.erf(h * 0.7071067811865476))
    tl.store(y_ptr + row * n_cols + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


def layernorm_gelu(x, weight, bias, eps):
    if x.shape[-1] > MAX_COLS:
        raise ValueError(f"rows of {x.shape[-1]} columns exceed MAX_COLS={MAX_COLS}")
    x2 = x.reshape(-1, x.shape[-1]).contiguous()
    y = torch.empty_like(x2)
    _layernorm_gelu_kernel[(x2.shape[0],)](x2, weight, bias, y, x2.shape[1], eps,
                                           BLOCK_SIZE=triton.next_power_of_2(x2.shape[1]))
    return y.reshape(x.shape)


class ModelNew(nn.Module):
    def __init__(self, hidden: int = 4096):
        super().__init__()
        self.norm = nn.LayerNorm(hidden, dtype=torch.bfloat16)

    def forward(self, x):
        return layernorm_gelu(x, self.norm.weight, self.norm.bias, self.norm.eps)
'''
# The classic first mistake: the LayerNorm's bias is dropped.
BAD_KERNEL = GOOD_KERNEL.replace("h = diff * rstd * w + b", "h = diff * rstd * w")
assert BAD_KERNEL != GOOD_KERNEL


# -- a test Toolbox: verify, then commit into the run's worktree ----------------------------

def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=kopt", "-c", "user.email=kopt@localhost",
                           *args], cwd=repo, check=True, capture_output=True,
                          text=True).stdout


def check_candidate(case: Case, file: Path) -> tuple[bool, str]:
    """Load the candidate and compare it with the baseline on the smoke inputs."""
    from kopt.harness.data import agent_provide_inputs, build_model

    try:
        spec = importlib.util.spec_from_file_location(f"cand_{uuid.uuid4().hex}", file)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        ref = build_model(case, "smoke")
        new = build_model(case, "smoke", cls=module.ModelNew)
    except Exception as err:
        return False, f"loads: FAILED {type(err).__name__}: {err}"
    inputs = agent_provide_inputs(case, "smoke")
    with torch.no_grad():
        want = ref(*inputs.args).float()
        got = new(*inputs.args).float()
    tol = case.manifest.tolerance
    bad = ~torch.isclose(got, want, atol=tol.atol, rtol=tol.rtol)
    if bad.any():
        first = tuple(int(i) for i in bad.nonzero()[0])
        return False, (f"loads: ok\ncorrect: FAILED {int(bad.sum())} of {bad.numel()} elements "
                       f"differ; first at {first}: got {got[first].item():.4f}, expected "
                       f"{want[first].item():.4f}")
    return True, "loads: ok\ncorrect: ok"


def real_verifier(case: Case, file: Path) -> tuple[bool, str]:
    """kopt.harness.verify.verify_candidate: the verifier the optimizer uses."""
    from kopt.harness.verify import verify_candidate

    report = verify_candidate(case, file)
    return report.accepted, report.to_text()


class GitToolbox:
    """Verifies a candidate and commits it (kernel + verification JSON) on the run branch."""

    def __init__(self, case: Case, worktree: Path, checker=check_candidate) -> None:
        self.case = case
        self.worktree = worktree
        self.checker = checker
        self.verdicts: list[bool] = []
        worktree.mkdir(parents=True)
        shutil.copytree(case.directory, worktree / "case")
        _git(worktree, "init", "-q", "-b", f"kopt/{case.name}/test")
        _git(worktree, "add", "-A")
        _git(worktree, "commit", "-q", "-m", "run: baseline")

    def verify(self, rel: str) -> VerifyResult:
        accepted, report_text = self.checker(self.case, self.worktree / rel)
        self.verdicts.append(accepted)
        report = {"accepted": accepted, "candidate": rel, "text": report_text}
        side = self.worktree / rel.replace(".py", ".verification.json")
        side.write_text(json.dumps(report, indent=1) + "\n")
        _git(self.worktree, "add", rel, str(side.relative_to(self.worktree)))
        verdict = "verified" if accepted else "rejected"
        _git(self.worktree, "commit", "-q", "--allow-empty", "-m",
             f"optimizer: {self.case.name} iter {len(self.verdicts)} - {verdict}\n\n"
             f"Kopt-Verified: {str(accepted).lower()}")
        commit = _git(self.worktree, "rev-parse", "HEAD").strip()
        return VerifyResult(accepted, report_text, report, commit=commit)

    def profile(self, rel: str) -> dict[str, Any]:
        return {"latency_ms": {"median": 0.5}, "timing_label": "cpu-interpreter",
                "roofline": {"pct_of_floor": 40.0, "floor_ms": 0.2, "bound": "memory"},
                "top_kernels": [{"name": "_layernorm_gelu_kernel", "time_ms": 0.5,
                                 "pct": 100.0}]}

    def commits(self) -> list[str]:
        return _git(self.worktree, "log", "--format=%s", "--reverse").splitlines()

    def kernel_blobs(self) -> list[str]:
        """The kernel file's blob id at each iteration commit, oldest first."""
        shas = _git(self.worktree, "log", "--format=%H", "--reverse").split()[1:]
        kernel = f"kernels/{self.case.name}.py"
        return [_git(self.worktree, "rev-parse", f"{sha}:{kernel}").strip() for sha in shas]


def make_request(tmp: Path, *, name: str = "run", cancel: threading.Event | None = None,
                 iteration: int = 1, case: Case | None = None,
                 checker=check_candidate) -> tuple[EngineerRequest, GitToolbox]:
    case = case or load_case(CASE)
    toolbox = GitToolbox(case, tmp / ".kopt" / "worktrees" / name, checker)
    request = EngineerRequest(
        case=case, worktree=toolbox.worktree,
        plan={"targets": [{"rank": 1, "region": "norm+gelu", "fusion": "one row kernel",
                           "expected_gain_ms": 1.0}]},
        iteration=iteration, toolbox=Toolbox(verify=toolbox.verify, profile=toolbox.profile),
        run_dir=tmp / "manifests" / name, cancel=cancel or threading.Event(),
        options={"starting_point": False})
    return request, toolbox


class Recorder:
    def __init__(self) -> None:
        self.events: list[Event] = []

    def __call__(self, event: Event) -> None:
        self.events.append(event)

    def kinds(self, kind: str) -> list[Event]:
        return [e for e in self.events if e.kind == kind]


def last_tool_results(body: dict[str, Any]) -> list[dict[str, Any]]:
    last = body["messages"][-1]
    assert last["role"] == "user"
    return [b for b in last["content"] if b.get("type") == "tool_result"]


def wrong_then_right_script(seen: list[str], kernel: str = KERNEL) -> list[Any]:
    """Write a wrong kernel, verify, read the failure, write the right one, verify."""
    def after_rejection(body: dict[str, Any]) -> dict[str, Any]:
        results = last_tool_results(body)
        seen.append(results[0]["content"])
        return message(text("The bias is missing; adding it."),
                       tool_use("write_file", {"file_path": kernel, "content": GOOD_KERNEL}))

    return [
        message(text("Let me look at the case first."), tool_use("list_directory",
                                                                 {"path": "case"})),
        message(tool_use("read_file", {"file_path": "case/model.py"})),
        message(text("A fused row kernel."),
                tool_use("write_file", {"file_path": kernel, "content": BAD_KERNEL})),
        message(tool_use("verification_tool", {"candidate_path": kernel})),
        after_rejection,
        message(tool_use("verification_tool", {"candidate_path": kernel})),
    ]


def tiny_case(root: Path) -> Case:
    """layernorm_gelu at a size the real verifier checks quickly on the CPU interpreter."""
    directory = root / "cases" / "tiny_ln"
    directory.mkdir(parents=True)
    shutil.copy(load_case(CASE).model_file, directory / "model.py")
    (directory / "manifest.yaml").write_text(
        "name: tiny_ln\n"
        "description: LayerNorm then exact GELU, tiny (anthropic engineer tests)\n"
        "model: {module: model.py, class: Model, init_kwargs: {hidden: 256}}\n"
        "inputs:\n  args:\n    - {shape: [16, 256], dtype: bfloat16, init: normal}\n"
        "weights: {function: init_weights}\n"
        "tolerance: {atol: 2.0e-2, rtol: 2.0e-2}\n"
        "smoke:\n  args: [{shape: [8, 256]}]\n")
    return load_case(directory)


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch):
    """Start a fake server for a script; the SDK is pointed at it with a test key."""
    servers: list[FakeAnthropic] = []

    def start(script: list[Any]) -> FakeAnthropic:
        server = FakeAnthropic(script).__enter__()
        servers.append(server)
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-api03-TESTKEY0123456789abcdef")
        return server

    yield start
    for server in servers:
        server.__exit__(None, None, None)


# -- the whole loop ---------------------------------------------------------------------------

@pytest.mark.parametrize("stream", [True, False], ids=["sse", "json"])
def test_wrong_kernel_then_right_one_commits_each_verified_candidate(workspace, api, stream):
    seen: list[str] = []
    server = api(wrong_then_right_script(seen))
    request, toolbox = make_request(workspace)
    events = Recorder()
    proposal = make_engineer("anthropic", {"stream": stream}).propose(request, events)

    assert proposal.candidate == KERNEL and not proposal.cancelled
    assert proposal.verified is not None and proposal.verified.accepted
    assert (workspace / ".kopt/worktrees/run" / KERNEL).read_text() == GOOD_KERNEL
    # The loop stopped at the accepted candidate: the whole script, no extra call.
    assert server.remaining == 0 and len(server.requests) == 6
    # The verifier's report went back to the model verbatim.
    assert seen and seen[0].startswith(f"REJECTED: {KERNEL}")
    assert "correct: FAILED" in seen[0]
    # One commit per verified candidate, with its verdict.
    assert toolbox.commits() == ["run: baseline", f"optimizer: {CASE} iter 1 - rejected",
                                 f"optimizer: {CASE} iter 2 - verified"]
    assert proposal.verified.commit == _git(toolbox.worktree, "rev-parse", "HEAD").strip()
    # Streaming events reached the sink as they came.
    assert "".join(e.message for e in events.kinds(TEXT_DELTA)).startswith("Let me look")
    assert [e.data["name"] for e in events.kinds(TOOL_CALL)] == [
        "list_directory", "read_file", "write_file", "verification_tool", "write_file",
        "verification_tool"]
    assert [e.data["is_error"] for e in events.kinds(TOOL_RESULT)] == [False] * 6
    assert len(events.kinds(USAGE)) == 6
    assert proposal.usage["calls"] == 6 and proposal.usage["input_tokens"] == 600
    # Priced as the default model (Sonnet 5.5: $2 in, $10 out per million tokens).
    assert proposal.usage["cost_usd"] == pytest.approx(6 * (100 * 2 + 50 * 10) / 1e6)
    # The stable prefix is cached: system carries cache_control, tools are the five.
    body = server.requests[-1].body
    assert body["system"][-1]["cache_control"] == {"type": "ephemeral"}
    assert CASE in body["system"][0]["text"] and "ModelNew" in body["system"][0]["text"]
    assert [t["name"] for t in body["tools"]] == ["read_file", "write_file", "list_directory",
                                                  "verification_tool", "profiler_tool"]
    assert bool(body.get("stream")) is stream
    # The transcript holds every request, response and tool result.
    records = read_transcript(Path(proposal.transcript))
    kinds = [r["kind"] for r in records]
    assert kinds.count("request") == 6 and kinds.count("response") == 6
    assert kinds.count("tool_result") == 6 and kinds[0] == "session" and kinds[-1] == "end"
    assert records[-1]["reason"].startswith("accepted")


@pytest.mark.slow
def test_the_real_verifier_rejects_then_accepts_and_each_verdict_is_a_commit(workspace, api):
    case = tiny_case(workspace)
    kernel = f"kernels/{case.name}.py"
    seen: list[str] = []
    api(wrong_then_right_script(seen, kernel))
    request, toolbox = make_request(workspace, case=case, checker=real_verifier)
    proposal = make_engineer("anthropic").propose(request, Recorder())

    assert proposal.verified is not None and proposal.verified.accepted
    assert "verdict: accepted" in proposal.verified.report_text
    # The verifier's per-check report went back verbatim, naming the failing check.
    assert seen[0].startswith(f"REJECTED: {kernel}") and "correct: FAIL" in seen[0]
    assert toolbox.commits()[1:] == [f"optimizer: {case.name} iter 1 - rejected",
                                     f"optimizer: {case.name} iter 2 - verified"]


def test_offline_candidate_and_knowledge_go_into_the_system_prompt(workspace, api, monkeypatch):
    import kopt.phases.engineers.anthropic as mod

    monkeypatch.setattr(mod, "offline_starting_point",
                        lambda case, events, phase: "class ModelNew:  # offline draft\n    pass")
    server = api([message(text("Nothing to do."))])
    request, _ = make_request(workspace)
    request.options = {}
    proposal = make_engineer("anthropic").propose(request, Recorder())
    system = server.requests[0].body["system"][0]["text"]
    assert "offline draft" in system
    assert "LayerNorm numerics" in system  # knowledge retrieved for a LayerNorm case
    assert '"region": "norm+gelu"' in system  # the plan
    assert proposal.candidate is None and proposal.verified is None


# -- error paths ------------------------------------------------------------------------------

def test_401_is_one_clear_error_without_retries(workspace, api):
    server = api([ErrorReply(401, "authentication_error", "invalid x-api-key")] * 3)
    request, _ = make_request(workspace)
    with pytest.raises(EngineerError, match=r"rejected the key \(401") as info:
        make_engineer("anthropic").propose(request, Recorder())
    assert "ANTHROPIC_API_KEY" in info.value.one_line() and "\n" not in info.value.one_line()
    assert len(server.requests) == 1


def test_400_names_the_api_message(workspace, api):
    api([ErrorReply(400, "invalid_request_error", "max_tokens: too large")])
    request, _ = make_request(workspace)
    with pytest.raises(EngineerError, match="max_tokens: too large"):
        make_engineer("anthropic").propose(request, Recorder())


def test_429_then_success_retries_after_the_servers_delay(workspace, api):
    server = api([ErrorReply(429, "rate_limit_error", headers={"retry-after": "0"}),
                  message(text("done"))])
    request, _ = make_request(workspace)
    events = Recorder()
    proposal = make_engineer("anthropic").propose(request, events)
    assert len(server.requests) == 2 and proposal.usage["calls"] == 1
    assert any("429 rate_limit_error; retrying in 0.0s" in e.message for e in events.events)


def test_529_retried_with_backoff_then_gives_up_with_one_line(workspace, api):
    server = api([ErrorReply(529, "overloaded_error", "Overloaded")] * 3)
    request, _ = make_request(workspace)
    engineer = make_engineer("anthropic", {"max_retries": 2, "retry_base_s": 0.01})
    with pytest.raises(EngineerError, match=r"kept failing \(529 overloaded_error"):
        engineer.propose(request, Recorder())
    assert len(server.requests) == 3
    records = read_transcript(request.run_dir / "transcripts" / "optimizer.jsonl")
    assert [r["kind"] for r in records][-1] == "end"


def test_malformed_tool_input_path_escape_and_syntax_error_go_back_as_tool_errors(
        workspace, api):
    outside = workspace / "outside.txt"
    outside.write_text("not yours")
    worktree = workspace / ".kopt/worktrees/run"
    calls = [
        ("write_file", {"path": KERNEL}),                         # malformed: wrong argument
        ("read_file", {"file_path": "../../../outside.txt"}),      # `..` escape
        ("read_file", {"file_path": str(outside)}),                # absolute path
        ("read_file", {"file_path": "link/outside.txt"}),          # symlink leading out
        ("write_file", {"file_path": KERNEL, "content": "def f(:\n"}),  # syntax error
        ("verification_tool", {"candidate_path": KERNEL}),         # nothing written yet
    ]
    script: list[Any] = [message(*[tool_use(n, i) for n, i in calls])]
    script.append(lambda body: message(text(json.dumps(
        [r["is_error"] for r in last_tool_results(body)]))))
    server = api(script)
    request, toolbox = make_request(workspace)
    (worktree / "link").symlink_to(workspace, target_is_directory=True)
    events = Recorder()
    proposal = make_engineer("anthropic").propose(request, events)

    results = last_tool_results(server.requests[1].body)
    assert [r["is_error"] for r in results] == [True] * 6
    contents = [r["content"] for r in results]
    assert "missing argument(s) file_path" in contents[0]
    assert "'..'" in contents[1] and "absolute" in contents[2] and "symlink" in contents[3]
    assert "SyntaxError" in contents[4] and "line 1" in contents[4]
    assert "write the candidate first" in contents[5]
    assert not (worktree / KERNEL).exists()            # the bad Python was not written
    assert "not yours" not in json.dumps([e.message for e in events.events])
    assert toolbox.commits() == ["run: baseline"]      # nothing verified, nothing committed
    assert proposal.candidate is None


def test_connection_dropped_mid_stream_fails_the_iteration_and_the_run_can_resume(
        workspace, api):
    api([message(tool_use("write_file", {"file_path": KERNEL, "content": BAD_KERNEL})),
         message(tool_use("verification_tool", {"candidate_path": KERNEL})),
         DropReply(message(text("I will now fix the bias " * 20)), after_events=4)])
    request, toolbox = make_request(workspace)
    engineer = make_engineer("anthropic")
    with pytest.raises(StreamLostError, match="lost mid-response") as info:
        engineer.propose(request, Recorder())
    assert "--resume" in info.value.one_line()
    # What was verified before the drop is committed; the transcript says what happened.
    assert toolbox.commits()[-1] == f"optimizer: {CASE} iter 1 - rejected"
    records = read_transcript(request.run_dir / "transcripts" / "optimizer.jsonl")
    assert any(r["kind"] == "error" and "stream lost" in r["error"] for r in records)
    assert records[-1]["kind"] == "end" and "failed" in records[-1]["reason"]

    # Resuming: the next iteration (same engineer, new connection) completes.
    api([message(tool_use("write_file", {"file_path": KERNEL, "content": GOOD_KERNEL})),
         message(tool_use("verification_tool", {"candidate_path": KERNEL}))])
    request.iteration = 2
    request.feedback = "connection lost; continue"
    proposal = engineer.propose(request, Recorder())
    assert proposal.verified is not None and proposal.verified.accepted
    assert toolbox.commits()[-1] == f"optimizer: {CASE} iter 2 - verified"


def test_cancel_mid_stream_keeps_the_last_written_candidate(workspace, api):
    cancel = threading.Event()
    api([message(tool_use("write_file", {"file_path": KERNEL, "content": BAD_KERNEL})),
         message(text("Now let me think about this for a very long time. " * 40))])
    request, toolbox = make_request(workspace, cancel=cancel)

    def sink(event: Event) -> None:
        if event.kind == TEXT_DELTA:
            cancel.set()  # Ctrl-C while the model is talking

    proposal = make_engineer("anthropic").propose(request, sink)
    assert proposal.cancelled and proposal.candidate == KERNEL
    assert proposal.verified is None and toolbox.commits() == ["run: baseline"]
    records = read_transcript(Path(proposal.transcript))
    assert records[-1] == {**records[-1], "kind": "end", "reason": "cancelled"}


def test_budgets_stop_the_loop(workspace, api):
    server = api([message(tool_use("write_file", {"file_path": KERNEL, "content": BAD_KERNEL}),
                          tool_use("verification_tool", {"candidate_path": KERNEL})),
                  message(text("never requested"))])
    request, toolbox = make_request(workspace)
    proposal = make_engineer("anthropic", {"max_verifications": 1}).propose(request, Recorder())
    assert len(server.requests) == 1 and "verification budget spent" in proposal.notes
    assert proposal.verified is not None and not proposal.verified.accepted
    assert proposal.candidate == KERNEL

    server = api([message(tool_use("list_directory", {}), input_tokens=10_000),
                  message(text("never requested"))])
    request, _ = make_request(workspace, name="run2")
    proposal = make_engineer("anthropic", {"max_run_cost_usd": 0.01}).propose(request, Recorder())
    assert len(server.requests) == 1 and "dollar budget spent" in proposal.notes


def test_no_key_is_a_clear_error(workspace, monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    request, _ = make_request(workspace)
    with pytest.raises(EngineerError, match="ANTHROPIC_API_KEY is not set"):
        make_engineer("anthropic").propose(request, Recorder())


# -- secrets ------------------------------------------------------------------------------------

def test_the_key_leaves_no_trace_in_the_workspace_or_git_history(workspace, api, monkeypatch):
    key = "sk-ant-api03-SECRET-" + uuid.uuid4().hex
    seen: list[str] = []
    script = wrong_then_right_script(seen)
    # A model that echoes the key (it cannot know it, but a proxy might inject it).
    script.insert(0, message(text(f"debug: {key}"), tool_use("list_directory", {})))
    server = api(script)
    monkeypatch.setenv("ANTHROPIC_API_KEY", key)
    request, toolbox = make_request(workspace)
    make_engineer("anthropic").propose(request, Recorder())

    sent = server.requests[0].headers
    assert key in (sent.get("x-api-key", "") + sent.get("authorization", ""))  # it was used
    for file in workspace.rglob("*"):
        if file.is_file():
            assert key.encode() not in file.read_bytes(), file
    history = _git(toolbox.worktree, "log", "-p", "--all")
    assert key not in history and GOOD_KERNEL.splitlines()[0] in history
    transcript = (request.run_dir / "transcripts" / "optimizer.jsonl").read_text()
    assert "debug: [redacted]" in transcript


def test_cancel_during_a_retry_wait_returns_at_once(workspace, api):
    import time

    cancel = threading.Event()
    server = api([ErrorReply(429, "rate_limit_error", headers={"retry-after": "30"}),
                  message(text("never requested"))])
    request, _ = make_request(workspace, cancel=cancel)
    threading.Timer(0.3, cancel.set).start()
    started = time.monotonic()
    proposal = make_engineer("anthropic").propose(request, Recorder())
    assert proposal.cancelled and time.monotonic() - started < 10  # not the 30 s asked for
    assert len(server.requests) == 1
