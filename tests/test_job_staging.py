"""Job folders staged for the workers (`harness.job.stage_job`): a verification's tensors are
written once and hard-linked into each candidate's folder; each worker still takes its own off
the disk before any candidate code runs."""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
from safetensors.torch import load, load_file

from kopt.harness.job import restage_request, stage_job
from kopt.harness.jobs.supervised import take_staged_inputs


def _tensors() -> dict[str, dict[str, torch.Tensor]]:
    torch.manual_seed(0)
    return {"weights-main": {"w": torch.randn(5, 3)}, "main-0": {"x": torch.randn(7)}}


def test_a_second_job_links_the_first_ones_files_and_each_takes_its_own(tmp_path: Path) -> None:
    tensors = _tensors()
    first = stage_job("reference", {"sets": []}, tensors=tensors, root=tmp_path)
    second = stage_job("candidate", {"sets": []}, tensors=tensors, root=tmp_path, link_from=first)
    for name in tensors:
        a, b = first / "inputs" / f"{name}.safetensors", second / "inputs" / f"{name}.safetensors"
        assert os.stat(a).st_ino == os.stat(b).st_ino and os.stat(a).st_nlink == 2
    taken = take_staged_inputs(first)  # the reference's worker: its folder gone, the links kept
    assert not (first / "inputs").exists()
    assert torch.equal(load(taken["weights-main"])["w"], tensors["weights-main"]["w"])
    kept = second / "inputs" / "main-0.safetensors"
    assert os.stat(kept).st_nlink == 1
    assert torch.equal(load_file(str(kept))["x"], tensors["main-0"]["x"])
    assert set(take_staged_inputs(second)) == set(tensors) and not (second / "inputs").exists()


def test_a_file_the_first_job_lacks_is_written(tmp_path: Path) -> None:
    tensors = _tensors()
    first = stage_job("reference", {"sets": []}, tensors={"main-0": tensors["main-0"]}, root=tmp_path)
    second = stage_job("candidate", {"sets": []}, tensors=tensors, root=tmp_path, link_from=first)
    written = second / "inputs" / "weights-main.safetensors"
    assert os.stat(written).st_nlink == 1
    assert torch.equal(load_file(str(written))["w"], tensors["weights-main"]["w"])


def test_a_staged_request_is_rewritten_keeping_its_other_keys(tmp_path: Path) -> None:
    job = stage_job("candidate", {"device": "cpu", "sets": [{"name": "main"}, {"name": "big"}]},
                    root=tmp_path)
    restage_request(job, {"sets": [{"name": "main"}]})
    request = json.loads((job / "request.json").read_text())
    assert request == {"job": "candidate", "device": "cpu", "sets": [{"name": "main"}]}


def test_a_candidate_job_stages_sealed_files_its_child_never_inherits(tmp_path: Path) -> None:
    """The supervisor of a candidate job takes each staged file into a sealed memory file (not
    into its own memory), and a child it forks closes every descriptor it inherited but its
    link: candidate code cannot read another draw's values through /proc/self/fd."""
    from kopt.harness.jobs import sealed, supervised

    if not sealed.available() or not Path("/proc/self/fd").is_dir():
        import pytest

        pytest.skip("no sealed memfds or /proc here")
    tensors = _tensors()
    job = stage_job("candidate", {"sets": []}, tensors=tensors, root=tmp_path)
    staged = take_staged_inputs(job, sealed=True)
    assert not (job / "inputs").exists()
    assert all(isinstance(v, sealed.SealedBuffer) for v in staged.values())
    # the same bytes as staged, through a mapping of a new descriptor (what the child is sent)
    handed = staged["main-0"].dup()
    received = sealed.Sealed.receive(handed.fd)
    views = sealed.tensor_views(sealed.mapped(received))
    assert views is not None and torch.equal(views["x"], tensors["main-0"]["x"])
    with open(tmp_path / "other", "w") as other:  # any file the supervisor holds open

        def child(link: supervised.Link) -> None:
            fds = {}
            for name in os.listdir("/proc/self/fd"):
                try:
                    fds[name] = os.readlink(f"/proc/self/fd/{name}")
                except OSError:
                    pass  # the listing's own descriptor, closed by now
            link.send({"fds": fds, "link": link._sock.fileno()})

        pid, link = supervised.fork_child(child)
        try:
            msg = link.recv()
        finally:
            supervised.end_child(pid, link)
        assert other.fileno() >= 3
    kept = {int(k) for k in msg["fds"]}
    assert kept <= {0, 1, 2, msg["link"]}, msg["fds"]
    assert not any("memfd" in target for target in msg["fds"].values())
    for value in staged.values():
        value.close()
