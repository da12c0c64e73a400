"""Evidence the candidate cannot reach (issue 23) and verification messages (issue 17).

The static check on snippets; the supervisor's link refuses anything but plain values; the
optimizer's measure job keeps the reference out of the candidate's process; `kopt verify`
through the real entry point on files that are not candidates.
"""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import pytest

from kopt.harness.jobs.supervised import ChannelClosed, Link
from kopt.harness.verification.static import scan_source
from kopt.workbench.cli import main

CORPUS = Path(__file__).parent / "corpus"


@pytest.mark.parametrize("path", sorted((CORPUS / "honest").glob("*.py")), ids=lambda p: p.name)
def test_honest_corpus_is_static_clean(path: Path) -> None:
    assert scan_source(path.read_text()) == []


ALLOWED = """
import math
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.autotune(configs=[triton.Config({"B": 64})], key=["n"])
@triton.heuristics({"EVEN": lambda a: a["n"] % 64 == 0})
@triton.jit
def _k(x, n, B: tl.constexpr, EVEN: tl.constexpr):
    pass


@torch.compile
def launch(x):
    y = torch.empty_like(x).reshape(-1).contiguous()
    _k[(triton.cdiv(x.numel(), 64),)](y, x.numel())
    return torch.stack([y.view(x.shape)]).sum(0) * math.sqrt(2.0)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.ones(3))

    def forward(self, x):
        for m in self.modules():
            pass
        return launch(x)
"""


def test_what_honest_kernels_need_is_allowed() -> None:
    assert scan_source(ALLOWED) == []


@pytest.mark.parametrize("snippet, needle", [
    ("import sys\nf = sys._getframe(1)", "_getframe"),
    ("import inspect", "import inspect"),
    ("import gc\ngc.get_objects()", "import gc"),
    ("import ctypes", "import ctypes"),
    ("import importlib", "import importlib"),
    ("m = __import__('os')", "__import__"),
    ("import numpy as np", "import numpy"),
    ("import torch\ntorch.softmax = None", "assignment to torch.softmax"),
    ("import torch\ntorch.Tensor.add = None", "assignment to torch.Tensor.add"),
    ("import torch\nsetattr(torch, 'x', 1)", "setattr"),
    ("from torch.utils._python_dispatch import _disable_current_modes", "_disable_current_modes"),
    ("import torch\nm = torch._C._get_current_dispatch_mode()", "._C"),
    ("def f(): pass\nf.__kwdefaults__", "__kwdefaults__"),
    ("import os\nos.environ", "import os"),
    ("p = open('/proc/self/environ')", "open"),
    ("import subprocess", "import subprocess"),
    ("import threading", "import threading"),
    ("from triton.runtime import driver", "triton.runtime"),
    ("x = getattr(object, '__globals__')", "'__globals__'"),
    ("import torch\nn = 'ut' + 'ils'\nx = getattr(torch, n)", "<computed name>"),
])
def test_escape_hatches_are_refused_with_their_line(snippet: str, needle: str) -> None:
    found = scan_source("\n" + snippet + "\n")
    assert found, snippet
    assert any(needle in f.what for f in found), [f.text() for f in found]
    assert all(f.line >= 2 for f in found)


def test_the_link_carries_only_plain_values() -> None:
    a, b = socket.socketpair()
    left, right = Link(a), Link(b)
    left.send({"ev": "forward", "outputs": b"\x00\x01", "fact": {"n": [1, 2.5, None, True]}})
    assert right.recv() == {"ev": "forward", "outputs": b"\x00\x01",
                            "fact": {"n": [1, 2.5, None, True]}}
    left.send({"ev": "x", "code": (lambda: 0).__code__})  # the sender writes it as text
    assert isinstance(right.recv()["code"], str)
    import marshal
    import struct

    raw = marshal.dumps({"ev": "x", "code": (lambda: 0).__code__})  # a forged frame
    a.sendall(struct.pack("<QI", len(raw), 0) + raw)
    with pytest.raises(ChannelClosed, match="code"):
        right.recv()
    # large bytes travel as raw attachments after the message, and arrive as they left
    import threading

    big = bytes(range(256)) * 1024  # more than a socket buffer: sent from another thread
    sender = threading.Thread(target=left.send,
                              args=({"ev": "forward", "outputs": big, "post": [b"\x07" * 70000, b"x"]},))
    sender.start()
    got = right.recv()
    sender.join()
    assert got == {"ev": "forward", "outputs": big, "post": [b"\x07" * 70000, b"x"]}
    assert type(got["outputs"]) is bytes
    raw = marshal.dumps({"ev": "x", "outputs": {"__kopt_attachment__": 3}})  # no such attachment
    a.sendall(struct.pack("<QI", len(raw), 0) + raw)
    with pytest.raises(ChannelClosed, match="attachment"):
        right.recv()
    left.close()
    with pytest.raises(ChannelClosed):
        right.recv()


STACK_READER = '''
import sys
import torch.nn as nn
import torch.nn.functional as F
import torch


class ModelNew(nn.Module):
    """Class 9: returns the reference it finds on the caller's stack, else zeros."""

    def __init__(self, hidden: int = 4096):
        super().__init__()
        self.norm = nn.LayerNorm(hidden)

    def forward(self, x):
        frame = sys._getframe(1)
        while frame is not None:
            for name in ("reference", "ref"):
                ref = frame.f_locals.get(name)
                if isinstance(ref, list) and ref and isinstance(ref[0], torch.Tensor):
                    return ref[0]
            frame = frame.f_back
        return torch.zeros_like(x)
'''


def test_measure_job_holds_no_reference_in_the_candidates_process(workspace: Path) -> None:
    from kopt.harness.runner import measure_variant

    cheat = workspace / "stack_reader.py"
    cheat.write_text(STACK_READER)
    m = measure_variant("layernorm_gelu", cheat,
                        timing_options={"min_iters": 3, "max_iters": 3, "max_seconds": 1.0})
    assert m["ok"], m.get("error")
    assert m["correctness"]["checked"] and m["correctness"]["passed"] is False
    assert m["correctness"]["judged_by"] == "supervisor"


@pytest.mark.parametrize("content, says", [
    (b"", "is empty"),
    (b"\x7fELF\x00\x00binary", "binary"),
    (b"import torch\nclass Model(torch.nn.Module):\n    pass\n", "defines no `ModelNew`"),
    (b"import torch\ndef f(:\n    pass\n", "SyntaxError"),
])
def test_a_file_that_is_not_a_candidate_is_bad_input(tmp_path: Path, content: bytes, says: str,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "mine.py"
    bad.write_bytes(content)
    code = main(["verify", str(CORPUS / "cases" / "softmax_small"), str(bad), "--device", "cpu"])
    err = capsys.readouterr().err
    assert code == 2
    assert says in err and str(bad) in err.replace("\n", "")
    assert "candidate.py" not in err


def test_a_directory_and_a_negative_timeout_are_named(tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    case = str(CORPUS / "cases" / "softmax_small")
    assert main(["verify", case, str(tmp_path)]) == 2
    assert "is a directory" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        main(["verify", case, str(CORPUS / "honest" / "softmax.py"), "--timeout", "-5"])
    assert exc.value.code == 2
    assert "--timeout" in capsys.readouterr().err


@pytest.mark.gpu
def test_on_the_gpu_launches_are_confirmed_by_the_device_trace() -> None:
    """The CUDA profiler's activity records must show the kernels the launcher counted."""
    from kopt.harness.verify import verify_candidates

    honest, decoy = CORPUS / "honest" / "softmax.py", CORPUS / "cheats" / "c09_empty_grid_launch.py"
    good, bad = verify_candidates(CORPUS / "cases" / "softmax_small", [honest, decoy],
                                  device="cuda")
    assert good.accepted, good.to_text()
    assert not bad.check("triton_launched").passed


def test_poisoned_runs_differ_only_where_an_element_was_never_written() -> None:
    """every_element_written compares its two poisoned runs within the case's tolerance: the
    last-bit noise of a library op that is not bit-reproducible (atomics in a cuDNN
    algorithm) is not an unwritten element; a poisoned one (NaN in one run, -1234.5 in the
    other) is, and so is any integer difference."""
    import torch

    from kopt.harness.tolerance import Tolerance
    from kopt.harness.verify import _unlike_elements

    tol = Tolerance(1e-4, 1e-4, 1e-5)
    a = torch.linspace(-3.0, 3.0, 1000)
    noisy = a + torch.where(torch.arange(1000) % 7 == 0, 1e-7, 0.0)
    assert _unlike_elements(a, noisy, tol) == 0
    poisoned_a, poisoned_b = a.clone(), a.clone()
    poisoned_a[10:13], poisoned_b[10:13] = float("nan"), -1234.5
    assert _unlike_elements(poisoned_a, poisoned_b, tol) == 3
    assert _unlike_elements(poisoned_a, poisoned_a.clone(), tol) == 0  # NaN where both have it
    ints = torch.arange(10)
    assert _unlike_elements(ints, ints + (ints == 3), tol) == 1
    assert _unlike_elements(a, noisy, None) > 0  # no tolerance: bit for bit


def test_a_parser_bookkeeping_error_is_retried_on_a_fresh_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """CPython 3.11 raised "AST constructor recursion depth mismatch" parsing a 100-layer
    ResNet's candidate from the suite's deep call stack (KernelBench level-3 10): the parse is
    retried on a fresh thread; a real syntax error is still one."""
    import ast as ast_module

    from kopt.harness.verification.static import parse_source

    real = ast_module.parse
    calls: list[str] = []

    def flaky(*args: object, **kwargs: object) -> ast_module.Module:
        calls.append(threading.current_thread().name)
        if len(calls) == 1:
            raise SystemError("AST constructor recursion depth mismatch (before=42, after=54)")
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(ast_module, "parse", flaky)
    tree = parse_source("class ModelNew:\n    pass\n")
    assert isinstance(tree.body[0], ast_module.ClassDef) and calls[1] == "kopt-parse"
    calls.clear()
    with pytest.raises(SyntaxError):
        parse_source("def (:\n")


@pytest.mark.parametrize("chunk", [1 << 26, 5], ids=["whole", "in chunks of 5"])
def test_weights_after_forward_are_compared_in_the_worker_by_the_parents_rule(
        monkeypatch: pytest.MonkeyPatch, chunk: int) -> None:
    """The candidate job's child compares the model's weights after its forwards with the
    staged state_dict (loaded afresh from its bytes) and sends them to the parent only when a
    bit differs: one flipped bit, a missing key or another shape sends them; state outside the
    state_dict (`attribute:` keys, compared as outputs) is not compared; a weight the model
    holds in another dtype counts as unchanged when its values convert back exactly, as the
    parent's `no_mutation` counts it. The staged bytes are read as views (no copy) and a weight
    is compared a chunk at a time: a flip in a later chunk counts too."""
    import torch
    from safetensors.torch import load, save

    from kopt.harness.jobs import candidate
    from kopt.harness.jobs.candidate import _weights_unchanged
    from kopt.harness.jobs.sealed import tensor_views
    from kopt.harness.model_state import ATTRIBUTE_PREFIX

    monkeypatch.setattr(candidate, "_COMPARE_CHUNK", chunk)

    torch.manual_seed(0)
    w = torch.randn(33, 7)
    b = torch.randn(7).to(torch.bfloat16).float()  # exactly representable in bfloat16
    staged = save({"fc.weight": w, "fc.bias": b, ATTRIBUTE_PREFIX + "h": torch.zeros(3)})
    state = {"fc.weight": w.clone(), "fc.bias": b.to(torch.bfloat16)}
    assert _weights_unchanged(state, staged, load)
    flipped = w.clone()
    flipped.view(-1).view(torch.int32)[5] ^= 1  # the lowest mantissa bit of one element
    assert not _weights_unchanged({**state, "fc.weight": flipped}, staged, load)
    assert not _weights_unchanged({"fc.bias": state["fc.bias"]}, staged, load)
    assert not _weights_unchanged({**state, "fc.weight": w.clone().reshape(7, 33)}, staged, load)
    assert not _weights_unchanged(state, None, load)
    late = w.clone()
    late.view(-1)[-1] += 1.0
    assert not _weights_unchanged({**state, "fc.weight": late}, staged, load)
    views = tensor_views(staged)
    assert views is not None and torch.equal(views["fc.weight"], w) and views["fc.bias"].shape == (7,)
