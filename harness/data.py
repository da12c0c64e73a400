"""Deterministic inputs and weights, identical for every variant, cached as safetensors.

Values depend only on (case, input set, seed) and the case's manifest and model source: the
same call returns bit-identical tensors in any process, on any machine. Tensors are drawn on
the CPU from a seeded generator (so CPU and GPU runs share values), then moved to the device.
Cache files live under `.kopt/cache/data/<case>/` and hold no pickles.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import sys
import threading
import types
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from kopt.harness import model_state
from kopt.harness.case import Case, ResolvedInputSet, ScalarSpec, TensorSpec
from kopt.harness.errors import CaseError
from kopt.harness.parallel_fills import ParallelFills
from kopt.harness.paths import cache_dir

TORCH_DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float64": torch.float64,
    "int64": torch.int64,
    "int32": torch.int32,
    "int16": torch.int16,
    "int8": torch.int8,
    "uint8": torch.uint8,
    "bool": torch.bool,
}


@dataclass
class Inputs:
    """Positional and keyword arguments of one forward call."""

    args: list[Any]
    kwargs: dict[str, Any] = field(default_factory=dict)

    def tensors(self) -> list[torch.Tensor]:
        items = list(self.args) + list(self.kwargs.values())
        return [t for t in items if isinstance(t, torch.Tensor)]

    def to(self, device: str | torch.device) -> Inputs:
        def move(v: Any) -> Any:
            return v.to(device) if isinstance(v, torch.Tensor) else v

        return Inputs([move(a) for a in self.args], {k: move(v) for k, v in self.kwargs.items()})


def _digest(*parts: object) -> str:
    text = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def _seed_for(*parts: object) -> int:
    return int(_digest(*parts)[:15], 16)


DRAW_CHUNK = 1 << 22
"""Elements per independently seeded chunk of a drawn tensor. Chunk 0 uses the seed itself,
so a tensor of at most this many elements is what one seeded generator draws."""
_GOLDEN = 0x9E3779B97F4A7C15
DRAW_SCHEME = "chunked-2026-11-23"
"""Part of every input cache key: files drawn by an earlier scheme are not mixed with new draws."""


def draw_tensor(spec: TensorSpec, seed: int) -> torch.Tensor:
    """One tensor from `spec`, drawn on the CPU from generators seeded with `seed`.

    Large tensors are drawn in chunks of `DRAW_CHUNK` elements, chunk i from its own generator
    seeded from (seed, i), on all cores: the values depend only on the seed (not on the thread
    count), and causal_softmax's 512M-element input takes a fraction of the 21 s one generator
    needed on a 2-core machine.
    """
    dtype = TORCH_DTYPES[spec.dtype]
    shape = list(spec.shape)
    if not spec.contiguous and len(shape) >= 2:
        shape[-1], shape[-2] = shape[-2], shape[-1]
    if spec.init == "zeros":
        return torch.zeros(shape, dtype=dtype)
    if spec.init == "ones":
        return torch.ones(shape, dtype=dtype)
    out = torch.empty(shape, dtype=dtype)
    flat = out.view(-1)
    chunks = range(0, flat.numel(), DRAW_CHUNK)

    def fill(start: int) -> None:
        n = min(DRAW_CHUNK, flat.numel() - start)
        chunk_seed = (seed + (start // DRAW_CHUNK) * _GOLDEN) % (1 << 63) if start else seed
        flat[start:start + n].copy_(_draw_flat(spec, dtype, n, torch.Generator().manual_seed(chunk_seed)))

    if len(chunks) <= 1:
        for start in chunks:  # none for an empty tensor
            fill(start)
    else:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=min(len(chunks), os.cpu_count() or 1)) as pool:
            list(pool.map(fill, chunks))  # torch releases the GIL while it draws
    return out


def _draw_flat(spec: TensorSpec, dtype: torch.dtype, n: int, gen: torch.Generator) -> torch.Tensor:
    """`n` values of `spec`'s distribution from `gen` (float32/int64 before the final cast)."""
    if spec.init == "randint" or (dtype.is_floating_point is False and spec.init != "bernoulli"):
        low = int(spec.low if spec.low is not None else 0)
        high = int(spec.high if spec.high is not None else (2 if dtype == torch.bool else 100))
        return torch.randint(low, high, (n,), generator=gen, dtype=torch.int64)
    if spec.init == "bernoulli":
        return torch.rand(n, generator=gen) < spec.p
    if spec.init == "uniform":
        low = spec.low if spec.low is not None else 0.0
        high = spec.high if spec.high is not None else 1.0
        return torch.rand(n, generator=gen, dtype=torch.float32).mul_(high - low).add_(low)
    return torch.randn(n, generator=gen, dtype=torch.float32).mul_(spec.std).add_(spec.mean)


def _as_view(t: torch.Tensor, spec: TensorSpec) -> torch.Tensor:
    if not spec.contiguous and t.dim() >= 2:
        return t.transpose(-1, -2)
    return t


def _cache_file(case: Case, kind: str, key: str) -> Path:
    return cache_dir() / "data" / case.name / f"{kind}-{key}.safetensors"


def _model_source_digest(case: Case) -> str:
    return hashlib.sha256(case.model_file.read_bytes()).hexdigest()[:16]


def agent_provide_inputs(
    case: Case,
    input_set: str = "main",
    seed: int = 0,
    *,
    device: str | torch.device = "cpu",
    cache: bool = True,
) -> Inputs:
    """The inputs of `input_set` for `seed`: deterministic, cached on disk, moved to `device`."""
    resolved = case.input_set(input_set)
    specs = {f"arg{i}": a for i, a in enumerate(resolved.args)}
    specs.update({f"kw_{k}": v for k, v in resolved.kwargs.items()})
    spec_dump = {k: v.model_dump() for k, v in specs.items()}
    key = f"{input_set}-s{seed}-{_digest(case.name, spec_dump, DRAW_SCHEME)[:12]}"
    file = _cache_file(case, "inputs", key)
    tensors: dict[str, torch.Tensor] | None = None
    if cache and file.is_file():
        try:
            tensors = load_file(str(file))
        except Exception:  # a torn or foreign file: draw again
            tensors = None
    if tensors is None:
        tensors = {
            k: draw_tensor(s, _seed_for(case.name, input_set, seed, k, s.model_dump()))
            for k, s in specs.items() if isinstance(s, TensorSpec)
        }
        if cache:
            _atomic_save(tensors, file)

    def value(k: str, s: TensorSpec | ScalarSpec) -> Any:
        if isinstance(s, ScalarSpec):
            return s.value
        return _as_view(tensors[k], s).to(device)

    args = [value(f"arg{i}", a) for i, a in enumerate(resolved.args)]
    kwargs = {k: value(f"kw_{k}", v) for k, v in resolved.kwargs.items()}
    return Inputs(args, kwargs)


def _atomic_save(tensors: dict[str, torch.Tensor], file: Path) -> None:
    file.parent.mkdir(parents=True, exist_ok=True)
    tmp = file.with_suffix(f".tmp{id(tensors)}")
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(tmp))
    tmp.replace(file)


def load_model_module(case: Case) -> types.ModuleType:
    """Import the case's model.py under a private module name (never `model`)."""
    path = case.model_file
    name = f"kopt_case_{case.name.replace('-', '_')}_{_model_source_digest(case)}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise CaseError(path, "cannot be imported", fix="is it a Python file?")
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(case.directory))
    try:
        spec.loader.exec_module(module)
    except Exception as err:  # user code: any failure is the case's
        raise CaseError(path, f"does not import: {type(err).__name__}: {err}",
                        fix=f"run `python {path}` to see the traceback") from err
    finally:
        sys.path.remove(str(case.directory))
    sys.modules[name] = module
    return module


def model_class(case: Case) -> type[torch.nn.Module]:
    module = load_model_module(case)
    cls_name = case.manifest.model.class_name
    cls = getattr(module, cls_name, None)
    if not (isinstance(cls, type) and issubclass(cls, torch.nn.Module)):
        raise CaseError(case.model_file, f"defines no nn.Module class {cls_name!r}",
                        key="model.class", fix="name the class in manifest.yaml model.class")
    return cls


SKIPPED_INITS = frozenset({torch.nn.init.kaiming_uniform_, torch.nn.init.uniform_,
                           torch.nn.init.normal_})
"""The initialisers a constructor's draws are skipped in: the ones torch hands to a torch
function mode whole (the others call Tensor methods, and a skipped Tensor draw inside a
rejection loop such as trunc_normal_'s would never end). They are what nn.Linear, the
convolutions, nn.Embedding and the recurrent layers initialise their weights with."""


class _SkippedFills(torch.overrides.TorchFunctionMode):
    """Leaves the tensors a constructor initialises through `SKIPPED_INITS` as allocated, and
    notes them. A torch function mode is this thread's own: other threads draw as usual."""

    def __init__(self) -> None:
        super().__init__()
        self.skipped: list[torch.Tensor] = []

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if func in SKIPPED_INITS:
            tensor = args[0] if args else kwargs.get("tensor")  # (nn.init passes it by keyword)
            if isinstance(tensor, torch.Tensor):
                self.skipped.append(tensor)
                return tensor
        return func(*args, **kwargs)


def instantiate(cls: type[torch.nn.Module], resolved: ResolvedInputSet, file: Path, *,
                state_follows: bool = False) -> torch.nn.Module:
    """`cls(*init_args, **init_kwargs)`, a constructor error as a CaseError naming the file.

    `state_follows`: the caller loads a whole state_dict next (`load_state_dict(strict=True)`),
    which overwrites every parameter and persistent buffer, so the random draws that would
    initialise them are skipped (a 2.15-billion-parameter MLP spent tens of seconds of each
    worker job drawing weights it then replaced: KernelBench level-3 2, H200, 2026-11-30).
    When a skipped draw filled anything outside the state_dict (a non-persistent buffer, a
    plain tensor attribute), or the constructor raised while its draws were skipped (code that
    checks or factorises the values it drew), the constructor runs again with every draw."""
    if state_follows:
        mode = _SkippedFills()
        try:
            with mode:
                model = _construct(cls, resolved, file)
        except CaseError:
            pass  # judged below, with every draw
        else:
            kept = {t.untyped_storage().data_ptr()
                    for t in model.state_dict(keep_vars=True).values() if isinstance(t, torch.Tensor)}
            if all(t.untyped_storage().data_ptr() in kept for t in mode.skipped):
                return model
    return _construct(cls, resolved, file)


def _construct(cls: type[torch.nn.Module], resolved: ResolvedInputSet, file: Path) -> torch.nn.Module:
    try:
        return cls(*resolved.init_args, **resolved.init_kwargs)
    except Exception as err:
        raise CaseError(file, f"{cls.__name__}(*{resolved.init_args!r}, **{resolved.init_kwargs!r}) "
                        f"raised {type(err).__name__}: {err}", key="model.init_kwargs",
                        fix="check the constructor arguments") from err


_GLOBAL_RNG = threading.RLock()
"""Held while torch's CPU generator is seeded and drawn from (`seeded_cpu_generator`)."""


@contextmanager
def seeded_cpu_generator(seed: int) -> Iterator[None]:
    """torch's CPU generator seeded with `seed` meanwhile, restored after, one thread at a time.

    A constructor initialises its parameters from that generator: threads of one process
    (`kopt suite --jobs N` prepares problems in threads) would otherwise interleave their
    draws, giving weights that are not the seed's. The generator is seeded directly:
    `torch.manual_seed` goes through torch._dynamo's wrapper, whose bookkeeping
    (`torch.fx.traceback.annotate`) is a module-level dict that another thread's export or
    seeding changes underneath it (`KeyError: 'custom'`, H100 and H200, 2026-11-26), and it
    seeds every CUDA generator too."""
    with _GLOBAL_RNG:
        gen = torch.default_generator
        state = gen.get_state()
        gen.manual_seed(seed)
        try:
            yield
        finally:
            gen.set_state(state)


def agent_provide_weights(case: Case, input_set: str = "main", seed: int = 0,
                          *, cache: bool = True) -> dict[str, torch.Tensor]:
    """The baseline's state_dict for the input set's constructor args, with its plain tensor
    attributes (`harness.model_state`): seeded, cached, on CPU."""
    resolved = case.input_set(input_set)
    key = _digest(case.name, resolved.init_args, resolved.init_kwargs, seed,
                  _model_source_digest(case), model_state.ATTRIBUTE_PREFIX, "non-persistent buffers",
                  case.manifest.weights.function if case.manifest.weights else None)[:16]
    file = _cache_file(case, "weights", key)
    if cache and file.is_file():
        try:
            return load_file(str(file))
        except Exception:
            pass
    cls = model_class(case)
    # large draws on every core (harness.parallel_fills): still a function of the seed
    with seeded_cpu_generator(_seed_for(case.name, "weights", seed) % (2**63)), ParallelFills():
        model = instantiate(cls, resolved, case.model_file)
        if case.manifest.weights is not None:
            fn = getattr(load_model_module(case), case.manifest.weights.function, None)
            if not callable(fn):
                raise CaseError(case.manifest_file,
                                f"model.py has no function {case.manifest.weights.function!r}",
                                key="weights.function", fix="define it or drop `weights:`")
            fn(model)
    state = model_state.weights_of(model, take=True)  # the state_dict and plain tensor attributes
    if cache and state:
        _atomic_save(state, file)
    return state


def build_model(case: Case, input_set: str = "main", *, device: str | torch.device = "cpu",
                cls: type[torch.nn.Module] | None = None, seed: int = 0) -> torch.nn.Module:
    """The baseline (or `cls`, e.g. a candidate's ModelNew) with the baseline's weights, in eval mode."""
    weights = agent_provide_weights(case, input_set, seed)
    return with_weights(cls or model_class(case), case.input_set(input_set), case.model_file,
                        weights, device)


def with_weights(cls: type[torch.nn.Module], resolved: ResolvedInputSet, file: Path,
                 weights: dict[str, torch.Tensor], device: str | torch.device) -> torch.nn.Module:
    """`cls` built for `resolved` (its initialisers' draws skipped), `weights` loaded strictly,
    on `device` in eval mode: how every worker job but the candidate's (which keeps instances
    across calls) builds a model."""
    model = instantiate(cls, resolved, file, state_follows=True)
    model_state.load(model, weights)  # plain tensor attributes too (harness.model_state)
    return model.to(device).eval()  # (after the load, as before: a cache made at .to() sees the weights)
