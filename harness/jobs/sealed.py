"""Tensors handed between a job's child and its supervisor in sealed memory instead of the socket.

A candidate job's forward sends its outputs (a full-size case: 134 MB a call, a dozen calls a
job) to the supervisor. Through the socket each output was copied five times (to the host,
into safetensors' bytes, through the kernel, into the supervisor's buffer, into a file): 1.5-2
s of a candidate job on the H100 (2026-11-28). Instead the child writes the safetensors file
straight into a `memfd` (the device's copy lands in the shared pages), *seals* it
(`F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL`: from then on no process, the
child included, can change its bytes or size) and passes the descriptor over the link
(`SCM_RIGHTS`). The supervisor accepts a descriptor only if the kernel reports those seals
(a pipe, a file or an unsealed memfd is refused: `Sealed.receive` raises), so what it writes
into the job's record at the end is what the child sent, byte for byte, as with the socket.

The other way, the supervisor hands the child each set's state_dict the same way
(`seal_bytes`; the child maps it read-only, `mapped`): the child copies the weights it loads
out of the mapping, and compares the model's weights after its forwards with the mapping itself.

The file is a plain safetensors file (8-byte header length, JSON header, the tensors' bytes
back to back); a dtype without a safetensors name returns None and the caller sends bytes.
"""

from __future__ import annotations

import fcntl
import json
import math
import mmap
import os
import struct
import warnings
from typing import Any

import torch

SEALS = fcntl.F_SEAL_SEAL | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE
NAMES = {torch.float64: "F64", torch.float32: "F32", torch.float16: "F16",
         torch.bfloat16: "BF16", torch.int64: "I64", torch.int32: "I32", torch.int16: "I16",
         torch.int8: "I8", torch.uint8: "U8", torch.bool: "BOOL"}
"""safetensors' names of the dtypes written here."""


# Bound when this module is imported (in a job's child: before the candidate exists), as the
# link's own calls are: a candidate that replaces `json.dumps` or `os.memfd_create` later
# changes nothing written here.
_dumps, _loads, _pack = json.dumps, json.loads, struct.pack
_memfd_create, _ftruncate, _close = getattr(os, "memfd_create", None), os.ftruncate, os.close
_mmap, _fcntl, _frombuffer = mmap.mmap, fcntl.fcntl, torch.frombuffer


def available() -> bool:
    """Whether this system has sealed memfds (Linux)."""
    return _memfd_create is not None and hasattr(fcntl, "F_ADD_SEALS")


class _Descriptor:
    """An open descriptor of a sealed memory file and its size in bytes, closed once."""

    def __init__(self, fd: int, size: int) -> None:
        self.fd, self.size = fd, size

    def close(self) -> None:
        fd, self.fd = self.fd, -1
        if fd >= 0:
            try:
                _close(fd)
            except OSError:
                pass


class SealedBuffer(_Descriptor):
    """The child's side: a sealed memfd to send (`Link.send` passes its descriptor, then
    closes it here)."""

    def dup(self) -> SealedBuffer:
        """Another descriptor of the same sealed file, to send (the link closes what it sends;
        this one stays open for the next)."""
        return SealedBuffer(os.dup(self.fd), self.size)


def seal_tensors(named: dict[str, torch.Tensor]) -> SealedBuffer | None:
    """`named` as a safetensors file in a sealed memfd; None when a dtype has no safetensors
    name here or the system has no sealed memfds (the caller sends bytes instead)."""
    if not available() or any(t.dtype not in NAMES for t in named.values()):
        return None
    header: dict[str, Any] = {}
    offset = 0
    for name, t in named.items():
        n = t.numel() * t.element_size()
        header[name] = {"dtype": NAMES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + n]}
        offset += n
    text = _dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the data starts 8-aligned
    base = 8 + len(text)
    size = base + offset
    fd = _memfd_create("kopt-tensors", os.MFD_ALLOW_SEALING | os.MFD_CLOEXEC)
    try:
        _ftruncate(fd, size)
        if size:
            with _mmap(fd, size) as mapped:
                mapped[:base] = _pack("<Q", len(text)) + text
                pages = _frombuffer(mapped, dtype=torch.uint8)
                for t, info in zip(named.values(), header.values(), strict=True):
                    start, end = info["data_offsets"]
                    if end > start:
                        pages[base + start:base + end].copy_(
                            t.detach().contiguous().reshape(-1).view(torch.uint8))
                del pages  # no buffer export may outlive the mapping
        _fcntl(fd, fcntl.F_ADD_SEALS, SEALS)
    except BaseException:
        _close(fd)
        raise
    return SealedBuffer(fd, size)


def seal_bytes(data: bytes) -> SealedBuffer | None:
    """`data` (a staged safetensors file) in a sealed memfd, for the supervisor to hand a
    state_dict to its child without the socket (an 8.6 GB state_dict through the socket and
    into the child's own bytes was seconds of copies); None where the system has no sealed
    memfds (the caller sends bytes instead). A new descriptor each call: the link closes the
    one it sends."""
    if not available():
        return None
    fd = _memfd_create("kopt-staged", os.MFD_ALLOW_SEALING | os.MFD_CLOEXEC)
    try:
        done = 0
        view = memoryview(data)
        while done < len(view):
            done += os.write(fd, view[done:done + (1 << 30)])
        _fcntl(fd, fcntl.F_ADD_SEALS, SEALS)
    except BaseException:
        _close(fd)
        raise
    return SealedBuffer(fd, len(view))


def seal_file(path: Any) -> SealedBuffer | None:
    """A staged file's bytes in a sealed memfd, copied by the kernel (`sendfile`): the
    supervisor takes a staged state_dict or input set without reading it into its own memory
    (an 8.6 GB state_dict read as bytes, then written into a memfd, took 15 s and 19 s of a
    verification on an H200, 2026-12-01). None where the system has no sealed memfds (the
    caller reads bytes instead). No torch op copies here: the supervisor forks its candidate's
    process afterwards, and a threaded copy (torch's intra-op pool) started before a fork left
    the child waiting forever on a lock its pool held (a CPU verification, 2026-12-01)."""
    if not available():
        return None
    fd = _memfd_create("kopt-staged", os.MFD_ALLOW_SEALING | os.MFD_CLOEXEC)
    try:
        with open(path, "rb") as src:
            size = os.fstat(src.fileno()).st_size
            done = 0
            while done < size:
                try:
                    n = os.sendfile(fd, src.fileno(), done, min(size - done, 1 << 30))
                except OSError:
                    n = 0
                if n <= 0:  # no in-kernel copy here: through this process, a chunk at a time
                    chunk = os.pread(src.fileno(), min(size - done, 1 << 26), done)
                    if not chunk:
                        raise OSError(f"{path}: shorter than its size ({done} of {size} bytes)")
                    os.lseek(fd, done, os.SEEK_SET)
                    n = os.write(fd, chunk)
                done += n
        _fcntl(fd, fcntl.F_ADD_SEALS, SEALS)
    except BaseException:
        _close(fd)
        raise
    return SealedBuffer(fd, size)


def tensor_views(buffer: Any) -> dict[str, torch.Tensor] | None:
    """The tensors of a safetensors file in memory (bytes, or the read-only mapping of a sealed
    memory file, `mapped`) as views of it: no copy, no new pages (an 8.6 GB state_dict loaded
    afresh cost seconds of page faults on a VM). None where it holds a dtype not in NAMES."""
    dtypes = {name: dtype for dtype, name in NAMES.items()}
    buf = memoryview(buffer).cast("B")
    size = int.from_bytes(buf[:8], "little")
    header = _loads(bytes(buf[8:8 + size]))
    out = {}
    with warnings.catch_warnings():  # a read-only buffer; nothing writes through these
        warnings.simplefilter("ignore")
        for k, info in header.items():
            if k == "__metadata__":
                continue
            dtype = dtypes.get(info["dtype"])
            if dtype is None:
                return None
            shape = [int(d) for d in info["shape"]]
            count = math.prod(shape)
            start = 8 + size + int(info["data_offsets"][0])
            flat = (_frombuffer(buf, dtype=dtype, count=count, offset=start) if count
                    else torch.empty(0, dtype=dtype))
            out[k] = flat.reshape(shape)
    return out


def mapped(buffer: Any) -> Any:
    """A received state_dict as a buffer: a `Sealed` one mapped read-only (no copy; its pages
    can change no more, the candidate's writes included), bytes as they are."""
    if not isinstance(buffer, Sealed):
        return buffer
    if buffer.size == 0:
        return b""
    return _mmap(buffer.fd, buffer.size, prot=mmap.PROT_READ)


class Sealed(_Descriptor):
    """The supervisor's side: bytes the kernel guarantees nobody can change any more."""

    @classmethod
    def receive(cls, fd: int) -> Sealed:
        """Take ownership of a received descriptor, or close it and raise ValueError when it
        is not a memfd sealed against writes and size changes."""
        try:
            seals = fcntl.fcntl(fd, fcntl.F_GET_SEALS)
        except OSError:
            os.close(fd)
            raise ValueError("a descriptor that is not a sealed memory file") from None
        if seals & SEALS != SEALS:
            os.close(fd)
            raise ValueError("a memory file that is not sealed against writes")
        return cls(fd, os.fstat(fd).st_size)

    def write_to(self, path: Any) -> None:
        """The bytes into a new file at `path` (copied by the kernel: `sendfile`)."""
        with open(path, "wb") as out:
            done = 0
            while done < self.size:
                try:  # copy_file_range refuses another filesystem (EXDEV) on older kernels
                    n = os.sendfile(out.fileno(), self.fd, done, self.size - done)
                except OSError:
                    n = 0
                if n <= 0:
                    out.write(os.pread(self.fd, self.size - done, done))
                    break
                done += n

    def __del__(self) -> None:
        self.close()
