"""The Strategy Analyst, settings, pricing, knowledge retrieval and transcript scrubbing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fake_anthropic_server import FakeAnthropic, message, text

from kopt.harness.errors import BadInputError, EngineerError
from kopt.phases.analyst import LOCAL_PLAN_SCHEMA, AnthropicAnalyst, extract_json, validation_error
from kopt.phases.engineers.anthropic import target_speedup, tunables_of
from kopt.phases.engineers.llm_client import price_for, usage_from
from kopt.phases.engineers.settings import DEFAULT_MODEL, load_settings
from kopt.phases.engineers.transcript import Transcript, read_transcript, scrub
from kopt.phases.knowledge_base import load_snippets, retrieve

PLAN = {"summary": "one fused row kernel", "target_speedup": 2.0,
        "targets": [{"rank": 1, "region": "norm+gelu", "ops": ["layer_norm", "gelu"],
                     "fusion": "LayerNorm and GELU in one row kernel",
                     "expected_gain_ms": 0.9}]}
INPUTS = {"case": "layernorm_gelu", "baseline": {"latency_ms": {"median": 1.29}},
          "profile": {"top_kernels": [{"name": "layer_norm", "time_ms": 0.7}]},
          "model_summary": {"params": 8192}, "roofline": {"floor_ms": 0.09}}


@pytest.fixture
def key(monkeypatch: pytest.MonkeyPatch) -> str:
    value = "sk-ant-api03-ANALYSTKEY-0123456789"
    monkeypatch.setenv("ANTHROPIC_API_KEY", value)
    return value


def analyst_against(script, workspace: Path, monkeypatch) -> tuple[AnthropicAnalyst, FakeAnthropic]:
    server = FakeAnthropic(script).__enter__()
    monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
    return AnthropicAnalyst(run_dir=workspace / "manifests" / "r1"), server


def test_analyst_returns_a_schema_valid_plan(workspace, key, monkeypatch):
    reply = "Here is the plan:\n```json\n" + json.dumps(PLAN) + "\n```"
    analyst, server = analyst_against([message(text(reply))], workspace, monkeypatch)
    try:
        assert analyst.plan(INPUTS) == PLAN
    finally:
        server.__exit__()
    body = server.requests[0].body
    assert "tools" not in body and "layernorm_gelu" in body["messages"][0]["content"]
    assert '"expected_gain_ms"' in body["system"][0]["text"]  # the schema is in the prompt
    assert analyst.usage.calls == 1


def test_analyst_is_asked_again_with_the_validation_error(workspace, key, monkeypatch):
    broken = {"targets": [{"rank": 0, "region": "x", "fusion": "y", "expected_gain_ms": 1}]}
    script = [message(text("I think we should fuse everything.")),
              message(text(json.dumps(broken))),
              message(text(json.dumps(PLAN)))]
    analyst, server = analyst_against(script, workspace, monkeypatch)
    try:
        assert analyst.plan(INPUTS) == PLAN
    finally:
        server.__exit__()
    second = server.requests[1].body["messages"][-1]["content"]
    third = server.requests[2].body["messages"][-1]["content"]
    assert "holds no JSON object" in second
    assert "at targets/0/rank" in third and "minimum of 1" in third
    records = read_transcript(workspace / "manifests/r1/transcripts/analyst.jsonl")
    assert [r["kind"] for r in records].count("response") == 3


def test_analyst_gives_up_after_bounded_attempts(workspace, key, monkeypatch):
    analyst, server = analyst_against([message(text("{not json"))] * 5, workspace, monkeypatch)
    try:
        with pytest.raises(EngineerError, match="no valid plan in 3 attempts"):
            analyst.plan(INPUTS)
    finally:
        server.__exit__()
    assert len(server.requests) == 3


def test_plan_validation_helpers():
    assert validation_error(PLAN, LOCAL_PLAN_SCHEMA) is None
    assert "'targets' is a required property" in validation_error({}, LOCAL_PLAN_SCHEMA)
    assert extract_json('noise {"a": {"b": 1}} trailing') == {"a": {"b": 1}}
    with pytest.raises(ValueError, match="not valid JSON"):
        extract_json("{'single': 'quotes'}")


def test_settings_precedence_options_over_config_over_default(workspace):
    assert load_settings().model == DEFAULT_MODEL
    config = workspace / ".kopt" / "config.yaml"
    config.parent.mkdir()
    config.write_text("anthropic:\n  model: claude-opus-5-5\n  max_verifications: 3\n")
    settings = load_settings()
    assert (settings.model, settings.max_verifications) == ("claude-opus-5-5", 3)
    assert load_settings({"model": "claude-haiku-4-5", "path": "x"}).model == "claude-haiku-4-5"
    config.write_text("model: claude-sonnet-5\n")
    assert load_settings().model == "claude-sonnet-5"
    config.write_text("anthropic:\n  temperature: 0.2\n")
    with pytest.raises(BadInputError, match="anthropic.temperature: unknown setting"):
        load_settings()
    config.write_text("anthropic:\n  max_turns: many\n")
    with pytest.raises(BadInputError, match="max_turns: expected int"):
        load_settings()


def test_cost_counts_cache_writes_and_reads():
    assert price_for("claude-sonnet-5-5-20260901") == (2.0, 10.0)
    assert price_for("claude-opus-4-1") == (15.0, 75.0)
    assert price_for("claude-opus-4-8") == (5.0, 25.0)
    usage = usage_from("claude-sonnet-5-5", {"input_tokens": 1000, "output_tokens": 2000,
                                             "cache_creation_input_tokens": 10_000,
                                             "cache_read_input_tokens": 100_000})
    assert usage.cost_usd == pytest.approx((1000 * 2 + 2000 * 10 + 10_000 * 2.5
                                            + 100_000 * 0.2) / 1e6)
    assert usage.total_tokens == 113_000


def test_knowledge_retrieval_follows_the_model():
    assert len(load_snippets()) >= 20
    layernorm = [s.source for s in retrieve("nn.LayerNorm mean variance eps row", 3)]
    assert any(s.startswith("reductions.md") for s in layernorm)
    matmul = [s.source for s in retrieve("nn.Linear matmul bias epilogue tile", 2)]
    assert matmul[0].startswith("matmul.md")
    assert retrieve("", 3) == []


def test_scrub_removes_secrets_and_key_shaped_strings(tmp_path):
    secret = "custom-secret-value"
    record = {"a": [f"x {secret} y", {"sk-ant-api03-abcdefghijkl": 1}], "n": 3}
    assert scrub(record, (secret,)) == {"a": ["x [redacted] y", {"[redacted]": 1}], "n": 3}
    transcript = Transcript(tmp_path / "t.jsonl", secrets=(secret,))
    transcript.write("request", params={"system": f"key={secret}"})
    assert secret not in (tmp_path / "t.jsonl").read_text()


def test_target_and_tunables_for_the_accelerator():
    from kopt.phases.engineers.settings import EngineerSettings

    assert target_speedup(PLAN, EngineerSettings()) == 2.0
    assert target_speedup({}, EngineerSettings()) is None
    assert target_speedup(PLAN, EngineerSettings(target_speedup=3.0)) == 3.0
    source = "BLOCK_SIZE = 1024  # why\nNUM_WARPS = 4\nEPS = 1e-5\nMAX_COLS = 65536\n"
    assert tunables_of(source) == {"BLOCK_SIZE": [512, 1024, 2048], "NUM_WARPS": [2, 4, 8]}
