"""targets.yaml names, `resolve_target` schemes and the remote job records (no network)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kopt.harness.errors import BadInputError, TargetError
from kopt.harness.targets import jobs as job_records
from kopt.harness.targets.resolve import resolve_target
from kopt.harness.targets.local import LocalTarget
from kopt.harness.targets.registry import load_targets
from kopt.harness.targets.ssh import SshTarget


def test_names_resolve_to_configured_targets(workspace: Path) -> None:
    (workspace / "targets.yaml").write_text(
        "targets:\n"
        "  h100: ssh://me@gpu-box:2222/scratch/kopt\n"
        "  lab:\n"
        "    spec: ssh://lab-node\n"
        "    python: /opt/venv/bin/python\n"
        "    push_source: false\n"
        "    identity_file: ~/.ssh/id_lab\n"
        "    ssh_options: [ProxyJump=bastion]\n")
    assert sorted(load_targets()) == ["h100", "lab"]
    h100 = resolve_target("h100")
    assert isinstance(h100, SshTarget)
    assert (h100.parsed.user, h100.parsed.port, h100.parsed.workspace) == ("me", 2222, "/scratch/kopt")
    assert h100.record_spec == "h100"  # job records re-resolve it by name
    lab = resolve_target("lab")
    assert isinstance(lab, SshTarget)
    assert lab.parsed.python == "/opt/venv/bin/python" and not lab.parsed.push_source
    command = lab._ssh_command("true")
    assert "ProxyJump=bastion" in command and str(Path("~/.ssh/id_lab").expanduser()) in command
    assert "BatchMode=yes" in command  # never prompts; host keys are checked, never accepted


def test_dot_kopt_targets_yaml_is_read_too(workspace: Path) -> None:
    (workspace / ".kopt").mkdir()
    (workspace / ".kopt" / "targets.yaml").write_text("targets:\n  box: ssh://box\n")
    assert isinstance(resolve_target("box"), SshTarget)
    assert isinstance(resolve_target(None), LocalTarget)
    assert isinstance(resolve_target("local"), LocalTarget)


@pytest.mark.parametrize("text, needle", [
    ("targets:\n  box: {spec: ssh://box, pyhton: x}\n", "targets.box"),
    ("targets:\n  local: ssh://box\n", "reserved"),
    ("targets: [\n", "not valid YAML"),
])
def test_bad_targets_yaml_is_one_line(workspace: Path, text: str, needle: str) -> None:
    (workspace / "targets.yaml").write_text(text)
    with pytest.raises(BadInputError) as caught:
        load_targets()
    assert needle in caught.value.one_line() and "\n" not in caught.value.one_line()


def test_unknown_name_and_scheme_list_the_options(workspace: Path) -> None:
    (workspace / "targets.yaml").write_text("targets:\n  h100: ssh://gpu\n")
    with pytest.raises(TargetError, match=r"unknown target 'h10'.*\(h100\)"):
        resolve_target("h10")
    with pytest.raises(TargetError, match="unknown target scheme 'sssh'"):
        resolve_target("sssh://gpu")


def test_job_records_by_prefix(workspace: Path) -> None:
    for job_id in ("1122-0101-aaaa", "1122-0101-aabb", "1122-0202-cccc"):
        job_records.save(job_records.JobRecord(id=job_id, target="ssh://h", job="echo",
                                               local_dir="/x", remote_dir=f"jobs/{job_id}",
                                               timeout_s=10))
    assert job_records.load("1122-0202").id == "1122-0202-cccc"
    with pytest.raises(BadInputError, match="ambiguous"):
        job_records.load("1122-0101-aa")
    with pytest.raises(BadInputError, match="no remote job 'zz'"):
        job_records.load("zz")
    assert len(job_records.list_records()) == 3
