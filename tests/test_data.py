"""Deterministic inputs and weights: same bytes everywhere, cached as safetensors, ranges kept."""

from __future__ import annotations

import hashlib
import json
import os
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import kopt.harness.data as data
from kopt.harness.case import Case, load_case, load_case_dir
from kopt.harness.data import agent_provide_inputs, agent_provide_weights

ROOT = Path(__file__).resolve().parent.parent

MODEL = """\
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, hidden=16):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(hidden))

    def forward(self, x, idx, flag, k):
        return x * self.scale + idx.float().mean() * k
"""

MANIFEST = """\
name: datacase
model: {module: model.py, class: Model, init_kwargs: {hidden: 16}}
inputs:
  args:
    - {shape: [24, 16], dtype: bfloat16, init: normal}
    - {shape: [4000], dtype: int32, init: randint, low: 5, high: 9}
    - {shape: [64, 64], dtype: bool, init: bernoulli, p: 0.25}
    - {value: 3}
  kwargs: {}
shapes:
  - args: [{shape: [40, 16], contiguous: false}, {}, {}, {}]
smoke:
  args: [{shape: [4, 16]}, {shape: [100]}, {}, {value: 2}]
"""


@pytest.fixture
def case(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Case:
    """A small case with its own (empty) tensor cache."""
    monkeypatch.setenv("KOPT_HOME", str(tmp_path))
    monkeypatch.setenv("KOPT_CACHE", str(tmp_path / "cache"))
    d = tmp_path / "cases" / "datacase"
    d.mkdir(parents=True)
    (d / "manifest.yaml").write_text(MANIFEST)
    (d / "model.py").write_text(MODEL)
    return load_case_dir(d)


def digest(tensors: list[torch.Tensor]) -> str:
    h = hashlib.sha256()
    for t in tensors:
        h.update(str((t.dtype, tuple(t.shape))).encode())
        h.update(t.contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def cache_files(case: Case, kind: str) -> list[Path]:
    return sorted((Path(os.environ["KOPT_CACHE"]) / "data" / case.name).glob(f"{kind}-*"))


def test_same_bytes_in_another_process(case: Case) -> None:
    here = digest(agent_provide_inputs(case, "main", seed=7, cache=False).tensors())
    script = textwrap.dedent(f"""
        import hashlib, torch
        from kopt.harness.case import load_case
        from kopt.harness.data import agent_provide_inputs
        case = load_case({str(case.directory)!r})
        h = hashlib.sha256()
        for t in agent_provide_inputs(case, "main", seed=7, cache=False).tensors():
            h.update(str((t.dtype, tuple(t.shape))).encode())
            h.update(t.contiguous().view(torch.uint8).numpy().tobytes())
        print(h.hexdigest())
    """)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONHASHSEED": "123"}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         env=env, check=True, timeout=120)
    assert out.stdout.strip().splitlines()[-1] == here


def test_seeds_and_input_sets_give_different_values(case: Case) -> None:
    a = agent_provide_inputs(case, "main", seed=0, cache=False).args[0]
    b = agent_provide_inputs(case, "main", seed=1, cache=False).args[0]
    assert not torch.equal(a, b)
    assert torch.equal(a, agent_provide_inputs(case, "main", seed=0, cache=False).args[0])
    # Arguments of one draw are independent streams, not copies of one another.
    x = agent_provide_inputs(case, "main", seed=0, cache=False).args[0]
    assert not torch.equal(x[:4], agent_provide_inputs(case, "smoke", seed=0, cache=False).args[0])


def test_second_call_reads_the_cache(case: Case, monkeypatch: pytest.MonkeyPatch) -> None:
    first = agent_provide_inputs(case, "main", seed=0)
    files = cache_files(case, "inputs")
    assert len(files) == 1

    def no_drawing(*_: object) -> torch.Tensor:
        raise AssertionError("drew again instead of reading the cache")

    monkeypatch.setattr(data, "draw_tensor", no_drawing)
    second = agent_provide_inputs(case, "main", seed=0)
    assert digest(first.tensors()) == digest(second.tensors())


def test_corrupted_cache_file_is_redrawn(case: Case) -> None:
    expected = digest(agent_provide_inputs(case, "main", seed=0).tensors())
    (file,) = cache_files(case, "inputs")
    file.write_bytes(b"\x00garbage, not safetensors")
    assert digest(agent_provide_inputs(case, "main", seed=0).tensors()) == expected
    # ... and the cache holds a good file again.
    data.load_file(str(file))


def test_cache_files_are_plain_safetensors_without_pickle(case: Case) -> None:
    agent_provide_inputs(case, "main", seed=0)
    agent_provide_weights(case, "main", seed=0)
    files = cache_files(case, "inputs") + cache_files(case, "weights")
    assert len(files) == 2
    for file in files:
        raw = file.read_bytes()
        (n,) = struct.unpack("<Q", raw[:8])
        header = json.loads(raw[8:8 + n])
        ends = [v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"]
        # The whole file is the JSON header plus raw tensor bytes: nowhere to hide a pickle.
        assert len(raw) == 8 + n + max(ends)
        assert b"\x80\x02" not in raw[:8 + n] and not raw.startswith(b"PK")


def test_integer_and_bool_inputs_respect_their_declared_ranges(case: Case) -> None:
    _, idx, flag, k = agent_provide_inputs(case, "main", seed=0).args
    assert idx.dtype == torch.int32 and int(idx.min()) == 5 and int(idx.max()) == 8
    assert flag.dtype == torch.bool and 0.22 < flag.float().mean().item() < 0.28
    assert k == 3
    smoke = agent_provide_inputs(case, "smoke", seed=0).args
    assert smoke[1].shape == (100,) and 5 <= int(smoke[1].min()) and int(smoke[1].max()) <= 8
    assert smoke[3] == 2


def test_bundled_cross_entropy_targets_within_vocabulary(workspace: Path) -> None:
    logits, targets = agent_provide_inputs(load_case("cross_entropy"), "shape0").args
    assert int(targets.min()) >= 0 and int(targets.max()) < logits.shape[1] == 50257


def test_non_contiguous_input_arrives_as_a_view(case: Case) -> None:
    x = agent_provide_inputs(case, "shape0", seed=0).args[0]
    assert x.shape == (40, 16) and not x.is_contiguous() and x.t().is_contiguous()
    assert x.dtype == torch.bfloat16
    again = agent_provide_inputs(case, "shape0", seed=0).args[0]  # from the cache
    assert not again.is_contiguous() and torch.equal(x, again)


def test_weights_are_deterministic_cached_and_shaped_by_the_input_set(case: Case) -> None:
    a = agent_provide_weights(case, "main", seed=0)
    assert cache_files(case, "weights")
    b = agent_provide_weights(case, "main", seed=0, cache=False)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert a["scale"].shape == (16,)


def test_weights_drawn_by_threads_at_once_are_the_seeds(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """`kopt suite --jobs 4` prepares problems in threads of one process: each thread's seeded
    weights are the same as one thread's, and none raises inside torch's wrapper of
    manual_seed (2026-11-26, H100 and H200: `KeyError: 'custom'` cost a KernelBench row)."""
    from concurrent.futures import ThreadPoolExecutor

    monkeypatch.setenv("KOPT_HOME", str(tmp_path))
    monkeypatch.setenv("KOPT_CACHE", str(tmp_path / "cache"))
    d = tmp_path / "cases" / "mlp"
    d.mkdir(parents=True)
    (d / "model.py").write_text(
        "import torch.nn as nn\n\n\nclass Model(nn.Module):\n    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.layers = nn.Sequential(*[nn.Linear(192, 192) for _ in range(6)])\n\n"
        "    def forward(self, x):\n        return self.layers(x)\n")
    (d / "manifest.yaml").write_text("name: mlp\nmodel: {module: model.py, class: Model}\n"
                                     "inputs:\n  args: [{shape: [4, 192]}]\n")
    mlp = load_case_dir(d)
    want = agent_provide_weights(mlp, seed=7, cache=False)
    with ThreadPoolExecutor(max_workers=4) as pool:
        got = list(pool.map(lambda _: agent_provide_weights(mlp, seed=7, cache=False), range(16)))
    for state in got:
        assert all(torch.equal(state[k], want[k]) for k in want)


def test_inputs_move_to_the_requested_device_and_dtype_survives_the_cache(case: Case) -> None:
    agent_provide_inputs(case, "main", seed=0)
    x = agent_provide_inputs(case, "main", seed=0, device="meta").args[0]
    assert x.device.type == "meta" and x.dtype == torch.bfloat16


@pytest.mark.parametrize("init", ["normal", "uniform", "randint", "bernoulli"])
def test_chunked_draws_depend_on_the_seed_only(init: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from kopt.harness.case import TensorSpec

    extra = {"randint": {"low": -5, "high": 7, "dtype": "int32"}, "bernoulli": {"p": 0.3}}.get(init, {})
    spec = TensorSpec.model_validate({"shape": [7, 300], "dtype": "bfloat16", "init": init, **extra})
    one_generator = data.draw_tensor(spec, 123)  # 2100 elements: one chunk
    monkeypatch.setattr(data, "DRAW_CHUNK", 256)  # now 9 chunks, drawn on several threads
    chunked = data.draw_tensor(spec, 123)
    assert torch.equal(chunked, data.draw_tensor(spec, 123))
    monkeypatch.setattr(os, "cpu_count", lambda: 1)
    assert torch.equal(chunked, data.draw_tensor(spec, 123))  # not the thread count
    flat = chunked.view(-1)
    assert torch.equal(flat[:256], one_generator.view(-1)[:256])  # chunk 0 is the seed's own
    assert not torch.equal(flat[256:512], flat[512:768])  # each chunk has its own generator
    assert not torch.equal(chunked, data.draw_tensor(spec, 124))
    if init == "randint":
        assert int(chunked.min()) >= -5 and int(chunked.max()) < 7
    if init == "uniform":
        assert float(chunked.min()) >= 0.0 and float(chunked.max()) <= 1.0
    empty = TensorSpec.model_validate({"shape": [0, 300], "dtype": "bfloat16", "init": init, **extra})
    assert data.draw_tensor(empty, 123).shape == (0, 300)


FILLS_MODEL = """\
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, noise=False, truncated=False, checked=False):
        super().__init__()
        self.fc = nn.Linear(32, 24)
        self.emb = nn.Embedding(10, 8)
        if checked:  # a constructor that checks what it drew
            self.scale = nn.Parameter(nn.init.uniform_(torch.zeros(100), 2.0, 3.0))
            if float(self.scale.detach().min()) < 2.0:
                raise ValueError("scale out of range")
        if truncated:  # a rejection loop over Tensor draws: they are drawn, so it ends
            nn.init.trunc_normal_(self.emb.weight, std=0.02)
        if noise:  # a random projection outside the state_dict: it must be drawn
            self.register_buffer("proj", nn.init.normal_(torch.empty(8, 8)), persistent=False)

    def forward(self, x):
        return self.fc(x)
"""


def _fills_case(tmp_path: Path, noise: bool, truncated: bool = False,
                checked: bool = False) -> Case:
    name = f"fills{int(noise)}{int(truncated)}{int(checked)}"
    d = tmp_path / "cases" / name
    d.mkdir(parents=True)
    (d / "model.py").write_text(FILLS_MODEL)
    (d / "manifest.yaml").write_text(
        f"name: {name}\nmodel: {{module: model.py, class: Model, init_kwargs: "
        f"{{noise: {str(noise).lower()}, truncated: {str(truncated).lower()}, "
        f"checked: {str(checked).lower()}}}}}\n"
        "inputs:\n  args: [{shape: [4, 32]}]\n")
    return load_case_dir(d)


@pytest.mark.parametrize("noise", [False, True])
def test_a_model_whose_state_is_loaded_next_skips_the_draws_the_state_replaces(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, noise: bool) -> None:
    """`instantiate(state_follows=True)` (every worker job loads the baseline's state_dict
    next) leaves nn.init's draws undone: torch's generator is where it was. A draw that fills
    something outside the state_dict (a non-persistent buffer) makes it construct again with
    every draw, so that buffer is the seed's, as without the option. The state loaded on top
    is the baseline's either way."""
    monkeypatch.setenv("KOPT_HOME", str(tmp_path))
    monkeypatch.setenv("KOPT_CACHE", str(tmp_path / "cache"))
    case = _fills_case(tmp_path, noise)
    resolved, cls = case.input_set("main"), data.model_class(case)
    torch.manual_seed(3)
    before = torch.random.get_rng_state()
    model = data.instantiate(cls, resolved, case.model_file, state_follows=True)
    drew = not torch.equal(before, torch.random.get_rng_state())
    assert drew == noise
    if noise:
        torch.manual_seed(3)
        plain = data.instantiate(cls, resolved, case.model_file)
        assert torch.equal(model.proj, plain.proj)
    built = data.build_model(case)
    want = agent_provide_weights(case)
    assert all(torch.equal(v, want[k]) for k, v in built.state_dict().items())


def test_a_constructor_that_checks_its_draws_is_built_with_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A constructor that raises on values a skipped draw left (zeros here) is run again with
    every draw: the model is built as without the option, and its state is the baseline's."""
    monkeypatch.setenv("KOPT_HOME", str(tmp_path))
    monkeypatch.setenv("KOPT_CACHE", str(tmp_path / "cache"))
    case = _fills_case(tmp_path, False, checked=True)
    model = data.instantiate(data.model_class(case), case.input_set("main"), case.model_file,
                             state_follows=True)
    assert float(model.scale.detach().min()) >= 2.0
    built = data.build_model(case)
    want = agent_provide_weights(case)
    assert all(torch.equal(v, want[k]) for k, v in built.state_dict().items())


def test_an_initialiser_that_loops_over_its_draws_still_draws(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """trunc_normal_ redraws until its values fall inside the bounds (Tensor draws, not one of
    `SKIPPED_INITS`): skipping them would loop on unfilled memory. It runs as without the
    option: a drawn, truncated tensor, and the model's state the baseline's."""
    monkeypatch.setenv("KOPT_HOME", str(tmp_path))
    monkeypatch.setenv("KOPT_CACHE", str(tmp_path / "cache"))
    case = _fills_case(tmp_path, False, truncated=True)
    torch.manual_seed(5)
    model = data.instantiate(data.model_class(case), case.input_set("main"), case.model_file,
                             state_follows=True)
    w = model.emb.weight.detach()
    assert float(w.abs().max()) <= 2.0 and 0.005 < float(w.std()) < 0.05
    built = data.build_model(case)
    want = agent_provide_weights(case)
    assert all(torch.equal(v, want[k]) for k, v in built.state_dict().items())


def test_draws_skipped_in_one_thread_are_drawn_in_another(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The skip is the constructing thread's own (a torch function mode is thread-local):
    `kopt suite --jobs N` draws one problem's seeded weights while another thread builds."""
    import threading

    monkeypatch.setenv("KOPT_HOME", str(tmp_path))
    monkeypatch.setenv("KOPT_CACHE", str(tmp_path / "cache"))
    case = _fills_case(tmp_path, False)
    inside, done = threading.Event(), threading.Event()

    class Slow(torch.nn.Module):
        def __init__(self, **_: object) -> None:
            super().__init__()
            self.fc = torch.nn.Linear(4, 4)
            inside.set()
            done.wait(30)

    thread = threading.Thread(target=data.instantiate, args=(Slow, case.input_set("main"),
                                                              case.model_file),
                              kwargs={"state_follows": True})
    thread.start()
    try:
        assert inside.wait(30)
        want = agent_provide_weights(case, cache=False)
        assert want["fc.weight"].abs().sum() > 0 and want["fc.weight"].std() > 0.01
        assert torch.equal(want["fc.weight"], agent_provide_weights(case, cache=False)["fc.weight"])
    finally:
        done.set()
        thread.join(30)
