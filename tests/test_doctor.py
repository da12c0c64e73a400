"""`kopt doctor`: every check present, the interpreter really runs, secrets never printed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kopt.workbench.cli import main
from kopt.workbench.commands import doctor


def test_doctor_json_reports_every_check(workspace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["doctor", "--json", "--no-ceilings"])
    data = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    names = [c["name"] for c in data["checks"]]
    assert names == ["python", "torch", "triton", "gpu", "interpreter", "git", "api key",
                     "sandbox", "sandbox network", "sandbox filesystem", "sandbox processes",
                     "sandbox gpu"]
    by = {c["name"]: c for c in data["checks"]}
    assert by["interpreter"]["status"] == "ok"  # a real @triton.jit kernel ran
    assert by["api key"]["status"] == "warn" and "ANTHROPIC_API_KEY" in by["api key"]["fix"]
    assert by["git"]["status"] == "warn" and "git init" in by["git"]["fix"]  # tmp workspace
    assert by["gpu"]["status"] in ("ok", "warn")  # no GPU is a warning, never a failure
    assert code == 0 and data["ok"]
    # each layer enforced or, where this machine cannot, a warning with its fix (docs/SANDBOX.md)
    assert {la["name"] for la in data["sandbox"]["layers"]} >= {"network", "filesystem", "processes"}
    for layer in data["sandbox"]["layers"]:
        row = by[f"sandbox {layer['name']}"]
        assert row["status"] == ("ok" if layer["enforced"] else "warn"), row
        assert layer["enforced"] or layer["fix"]


def test_a_sandbox_layer_that_lets_a_probe_through_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    from kopt.harness import sandbox

    if not sandbox.probe().complete:
        pytest.skip(f"sandbox incomplete here: {sandbox.probe().reason}")
    monkeypatch.setattr(sandbox, "self_test", lambda: {"network": "connected", "filesystem": None,
                                                      "processes": None})
    by = {f.name: f for f in doctor.check_sandbox()}
    assert by["sandbox network"].status == "fail" and "connected" in by["sandbox network"].detail
    assert by["sandbox filesystem"].status == "ok"


def test_api_key_is_reported_but_never_printed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-secret-value-123")
    finding = doctor.check_api_key()
    assert finding.status == "ok"
    assert "sk-ant-secret-value-123" not in json.dumps(finding.__dict__)


def test_broken_interpreter_fails_with_a_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(doctor, "INTERPRETER_PROBE", "raise SystemExit('triton broke')\n")
    finding = doctor.check_interpreter()
    assert finding.status == "fail" and "triton broke" in finding.detail and finding.fix


def test_git_repository_workspace_is_ok(workspace: Path) -> None:
    import subprocess

    subprocess.run(["git", "init", "-q", str(workspace)], check=True)
    finding = doctor.check_git()
    assert finding.status == "ok" and "is a git repository" in finding.detail
