"""`kopt verify`: exit codes 0 accepted / 1 rejected / 2 bad input, and the --json contract."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kopt.harness.verify import CHECK_NAMES
from kopt.workbench.cli import main

CORPUS = Path(__file__).parent / "corpus"


def _last_json(out: str) -> dict:
    return json.loads(out.strip().splitlines()[-1])


def test_accepted_exits_0_with_json_contract(workspace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["verify", str(CORPUS / "cases" / "softmax_small"),
                 str(CORPUS / "honest" / "softmax.py"), "--device", "cpu", "--json"])
    out = capsys.readouterr().out
    assert code == 0, out
    data = _last_json(out)
    assert set(data) == {"accepted", "case", "candidate", "device", "checks"}
    assert data["accepted"] is True and data["case"] == "softmax_small" and data["device"] == "cpu"
    assert [c["name"] for c in data["checks"]] == list(CHECK_NAMES)
    assert all(set(c) == {"name", "passed", "detail", "status"} and c["passed"]
               and c["status"] == "pass" for c in data["checks"])
    assert "triton_launched" in out and "_softmax_kernel" in out


def test_rejected_exits_1_and_names_the_check(workspace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["verify", str(CORPUS / "cases" / "ln_gelu_small"),
                 str(CORPUS / "cheats" / "raises.py"), "--json"])
    out = capsys.readouterr().out
    assert code == 1
    data = _last_json(out)
    contained = next(c for c in data["checks"] if c["name"] == "contained")
    assert not data["accepted"] and not contained["passed"]
    assert "ValueError: BLOCK must be a power of two" in contained["detail"]


@pytest.mark.parametrize("args, needle", [
    (["verify", "no_such_case", "x.py"], "unknown case 'no_such_case'"),
    (["verify", str(CORPUS / "cases" / "softmax_small"), "missing.py"], "missing.py"),
])
def test_bad_input_exits_2(workspace: Path, capsys: pytest.CaptureFixture[str], args: list[str],
                           needle: str) -> None:
    assert main(args) == 2
    assert needle in capsys.readouterr().err


def test_timing_says_where_the_seconds_went(workspace: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["verify", str(CORPUS / "cases" / "softmax_small"),
                 str(CORPUS / "honest" / "softmax.py"), "--device", "cpu", "--json", "--timing"])
    captured = capsys.readouterr()
    assert code == 0, captured.out
    timing = _last_json(captured.out)["timing"]
    assert timing["elapsed_s"] > 0 and {"draws", "reference", "candidate"} <= set(timing["steps"])
    assert {"reference", "candidate"} <= set(timing["jobs"])
    assert "start and import" in timing["jobs"]["candidate"]["steps"]
    assert "seconds:" in captured.err and "candidate job" in captured.err
