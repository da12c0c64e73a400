"""A job's child hands tensors to its supervisor in sealed memory files (harness.jobs.sealed):
the bytes arrive as sent, nobody can change them afterwards, and anything unsealed is refused."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from kopt.harness.jobs import sealed, supervised

pytestmark = pytest.mark.skipif(not sealed.available(), reason="no sealed memfds here")


def _roundtrip(child_main) -> tuple[dict, int | None]:  # type: ignore[no-untyped-def]
    pid, link = supervised.fork_child(child_main)
    try:
        return link.recv(), None
    finally:
        supervised.end_child(pid, link)


def test_tensors_arrive_sealed_and_as_sent(tmp_path: Path) -> None:
    named = {"o0": torch.randn(37, 129), "o1": torch.arange(10, dtype=torch.int64),
             "o2": torch.randn(5, 7).to(torch.bfloat16), "o3": torch.tensor(True),
             "o4": torch.empty(0, 3), "o5": torch.randn(6, 4).t()}  # the last one strided

    def child(link: supervised.Link) -> None:
        link.send({"ev": "forward", "outputs": sealed.seal_tensors(named), "n": 1})

    msg, _ = _roundtrip(child)
    got = msg["outputs"]
    assert isinstance(got, sealed.Sealed) and msg["n"] == 1
    # the kernel refuses any change to its bytes or size, in this process as in any other
    with pytest.raises(PermissionError):
        os.pwrite(got.fd, b"x", 0)
    with pytest.raises(PermissionError):
        os.ftruncate(got.fd, 1)
    got.write_to(tmp_path / "out.safetensors")
    back = load_file(tmp_path / "out.safetensors")
    assert set(back) == set(named)
    for k, t in named.items():
        assert back[k].dtype == t.dtype and torch.equal(back[k], t.contiguous())


def test_an_unsealed_memory_file_or_a_pipe_is_refused() -> None:
    def unsealed(link: supervised.Link) -> None:
        fd = os.memfd_create("cheat", os.MFD_ALLOW_SEALING)
        os.write(fd, b"later rewritten")
        link.send({"outputs": sealed.SealedBuffer(fd, 15)})

    def pipe(link: supervised.Link) -> None:
        r, _w = os.pipe()
        link.send({"outputs": sealed.SealedBuffer(r, 0)})

    def shrink_only(link: supervised.Link) -> None:  # sealed, but still writable
        fd = os.memfd_create("cheat", os.MFD_ALLOW_SEALING)
        os.write(fd, b"x" * 16)
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW)
        link.send({"outputs": sealed.SealedBuffer(fd, 16)})

    for child in (unsealed, pipe, shrink_only):
        with pytest.raises(supervised.ChannelClosed, match="sent a"):
            _roundtrip(child)


def test_a_dtype_without_a_safetensors_name_goes_as_bytes() -> None:
    assert sealed.seal_tensors({"c": torch.zeros(2, dtype=torch.complex64)}) is None


def test_a_message_carries_at_most_max_sealed_buffers() -> None:
    def child(link: supervised.Link) -> None:
        many = [sealed.seal_tensors({"o": torch.zeros(1)})
                for _ in range(supervised.MAX_SEALED + 1)]
        try:
            link.send({"outputs": many})
        except supervised.ChannelClosed as err:
            link.send({"refused": str(err)})

    msg, _ = _roundtrip(child)
    assert "more than" in msg["refused"]


def test_a_state_dict_reaches_the_child_sealed_and_maps_read_only() -> None:
    """The supervisor's side of the same: a staged state_dict's bytes in a sealed memory file
    (`seal_bytes`), which the child maps read-only (`mapped`): its tensors read as views of
    the pages, a write through the mapping refused, the child's own copies (`_private_copy`)
    equal and separate; bytes (a system without sealed memfds) pass as they are."""
    from safetensors.torch import load, save

    from kopt.harness.jobs.candidate import _private_copy
    from kopt.harness.jobs.sealed import tensor_views

    state = {"w": torch.randn(33, 5), "n": torch.arange(4), "h": torch.randn(3).to(torch.bfloat16)}
    data = save(state)
    got: dict = {}

    def child(link: supervised.Link) -> None:
        msg = link.recv()
        buffer = sealed.mapped(msg["weights"])
        views = tensor_views(buffer)
        own = _private_copy(buffer, load)
        try:
            buffer[0:1] = b"x"
            writable = True
        except TypeError:
            writable = False
        link.send({"ev": "got", "writable": writable, "sealed": isinstance(msg["weights"], sealed.Sealed),
                   "same": all(torch.equal(views[k], state[k]) and torch.equal(own[k], state[k])
                               for k in state),
                   "apart": all(own[k].data_ptr() != views[k].data_ptr() for k in state)})

    pid, link = supervised.fork_child(child)
    try:
        link.send({"op": "set", "weights": sealed.seal_bytes(data)})
        got = link.recv()
    finally:
        supervised.end_child(pid, link)
    assert got == {"ev": "got", "writable": False, "sealed": True, "same": True, "apart": True}
    assert sealed.mapped(data) is data


def test_either_side_closes_its_descriptor_once(tmp_path: Path) -> None:
    file = tmp_path / "staged.safetensors"
    file.write_bytes(b"\x00" * 64)
    buffer = sealed.seal_file(file)
    assert isinstance(buffer, sealed.SealedBuffer)
    other = buffer.dup()
    received = sealed.Sealed.receive(os.dup(buffer.fd))
    for each in (buffer, other, received):
        fd = each.fd
        each.close()
        each.close()  # a second close neither raises nor closes a reused number
        assert each.fd == -1
        with pytest.raises(OSError):
            os.fstat(fd)
