"""The matmul template: the grouped-ordering tile loop of the Triton tutorial, fp32 accumulator,
then the pointwise epilogue on the accumulator tile before the one store (or, with BACKEND
cublas, torch's product read once by the epilogue kernel).
"""

from __future__ import annotations

from typing import Any

import torch

from kopt.phases.engineers.offline.fusion import DimMap, Group, Partition, library_product
from kopt.phases.engineers.offline.graph import LAYOUT, Node
from kopt.phases.engineers.offline.kernels.writer import (
    KernelSource,
    _origins,
    _Scope,
    _store_type,
    _Writer,
    float32_dot,
)
from kopt.phases.engineers.offline.pointwise import TL_TYPES, Operand, compute_type


class _MatmulWriter(_Writer):
    def __init__(self, group: Group, part: Partition, sym_code: Any) -> None:
        super().__init__(group, part, sym_code)
        self.staged: list[tuple[Node, str]] = []
        """Epilogue inputs: (node, 'D' | 'E'): broadcast to the mm result or its view."""

    def coord(self, k: int) -> str:
        names = ["rm[:, None]", "rn[None, :]"]
        if len(self.g.domain) == 3:
            names = ["pid_b"] + names
        return names[k]

    def load_mask(self, dm: DimMap) -> str | None:
        return "mask"

    def operand(self, a: Any, dm: DimMap, consumer: Node, scope: _Scope) -> Operand:
        if isinstance(a, Node) and a not in self.g.dmaps and a not in self.part.generated:
            kind = "D" if consumer.shape == self.g.domain else "E"
            key = ("staged", a, kind)
            got = scope.get(key)
            if got is not None:
                return got
            if (a, kind) not in self.staged:
                self.staged.append((a, kind))
            i = self.staged.index((a, kind))
            r = len(self.g.domain)
            offset = " + ".join(f"{self.coord(k)} * x{i}_s{k}" for k in range(r))
            var = self.fresh("x")
            self.emit(f"{var} = tl.load(x{i}_ptr + {offset}, mask=mask, other=0)  # {a.name}")
            ct = compute_type(a.dtype)
            if TL_TYPES[a.dtype] != ct:
                self.emit(f"{var} = {var}.to({ct})")
            op = Operand(var, ct)
            scope.values[key] = op
            return op
        return super().operand(a, dm, consumer, scope)


def matmul_kernel(group: Group, part: Partition, sym_code: Any, name: str, precision: str,
                  *, library_epilogue: bool = True) -> KernelSource:
    """A matmul group's kernel and launcher. `library_epilogue=False` keeps its epilogue in
    Triton even where cuBLAS(Lt) could apply it (`_library_epilogue`): codegen asks that of one
    group when every group of the model would otherwise run without Triton."""
    w = _MatmulWriter(group, part, sym_code)
    mm = group.anchor
    a, b = mm.args[0], mm.args[1]
    batched = mm.op == "bmm"
    w.indent = 1
    scope = _Scope()
    outs = group.outputs
    for o, y in enumerate(outs):
        v = w.value(y, scope)
        if y.dtype == torch.bfloat16:
            w.helpers.add("_to_bf16")
            w.emit(f"tl.store(y{o}_ptr + {' + '.join(f'{w.coord(k)} * y{o}_s{k}' for k in range(len(group.domain)))}, "
                   f"_to_bf16({v.as_type('tl.float32')}), mask=mask)  # {y.name}")
            continue
        w.emit(f"tl.store(y{o}_ptr + {' + '.join(f'{w.coord(k)} * y{o}_s{k}' for k in range(len(group.domain)))}, "
               f"{v.as_type(compute_type(y.dtype))}.to({_store_type(y.dtype)}), mask=mask)  # {y.name}")
    epilogue = w.lines
    r = len(group.domain)
    dot_kw = float32_dot(a.dtype, precision)
    flops = "2*M*N*K" + (" * batch" if batched else "")
    kernel = [
        "@triton.jit",
        f"def {name}(",
        f"    a_ptr, a_sb, a_sm, a_sk,  # ({'batch, ' if batched else ''}M, K) {str(a.dtype).removeprefix('torch.')}: {a.name}",
        f"    b_ptr, b_sb, b_sk, b_sn,  # ({'batch, ' if batched else ''}K, N) {str(b.dtype).removeprefix('torch.')}: {b.name}",
        f"    p_ptr, p_sb, p_sm, p_sn,  # ({'batch, ' if batched else ''}M, N) the product A @ B when PRODUCT_IN (else unused)",
        "    # epilogue inputs, broadcast to the result's shape (stride 0 where broadcast)",
    ]
    for i, (x, _kind) in enumerate(w.staged):
        kernel.append(f"    x{i}_ptr, " + ", ".join(f"x{i}_s{k}" for k in range(r)) + f",  # {x.name}")
    kernel.append("    # outputs (contiguous)")
    for o, y in enumerate(outs):
        kernel.append(f"    y{o}_ptr, " + ", ".join(f"y{o}_s{k}" for k in range(r)) + f",  # {y.name}")
    kernel += [f"    M, N, K,{''.join(f' {p},' for p, _ in w.scalar_args)}",
               "    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,",
               "    UPCAST: tl.constexpr,  # True only under the CPU interpreter, whose bf16 tl.dot is wrong",
               "    PRODUCT_IN: tl.constexpr,  # True: only the epilogue runs, on a product torch computed",
               "):",
               f"    # FLOPs: {flops}; bytes: A and B once per tile row/column, the result once",
               "    pid = tl.program_id(0)",
               "    pid_b = tl.program_id(1).to(tl.int64)",
               "    # grouped ordering: GROUP_M row-tiles share B's column tiles in L2",
               "    num_pid_m = tl.cdiv(M, BLOCK_M)",
               "    num_pid_n = tl.cdiv(N, BLOCK_N)",
               "    num_pid_in_group = GROUP_M * num_pid_n",
               "    group_id = pid // num_pid_in_group",
               "    first_pid_m = group_id * GROUP_M",
               "    group_size_m = tl.minimum(num_pid_m - first_pid_m, GROUP_M)",
               "    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)",
               "    pid_n = (pid % num_pid_in_group) // group_size_m",
               "    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)",
               "    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)",
               "    mask = (rm[:, None] < M) & (rn[None, :] < N)",
               "    if PRODUCT_IN:  # BACKEND cublas: torch computed the product; read each element once",
               "        p_ptrs = p_ptr + pid_b * p_sb + rm[:, None] * p_sm + rn[None, :] * p_sn",
               "        acc = tl.load(p_ptrs, mask=mask, other=0.0).to(tl.float32)",
               "    else:  # BACKEND triton: the tile loop over K",
               "        rk = tl.arange(0, BLOCK_K)",
               "        ram = rm % M  # wrap out-of-range rows/cols: loads stay in bounds, stores are masked",
               "        rbn = rn % N",
               "        a_ptrs = a_ptr + pid_b * a_sb + ram[:, None] * a_sm + rk[None, :] * a_sk",
               "        b_ptrs = b_ptr + pid_b * b_sb + rk[:, None] * b_sk + rbn[None, :] * b_sn",
               "        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)",
               "        for k in range(0, tl.cdiv(K, BLOCK_K)):",
               "            k_left = K - k * BLOCK_K",
               "            a = tl.load(a_ptrs, mask=rk[None, :] < k_left, other=0.0)",
               "            b = tl.load(b_ptrs, mask=rk[:, None] < k_left, other=0.0)",
               "            if UPCAST:",
               "                a = a.to(tl.float32)",
               "                b = b.to(tl.float32)",
               f"            acc = tl.dot(a, b, acc{dot_kw})",
               "            a_ptrs += BLOCK_K * a_sk",
               "            b_ptrs += BLOCK_K * b_sk",
               "    # epilogue: " + ", ".join(n.origin for n in group.nodes if n is not mm)[:150]]
    kernel += epilogue
    params = ["device", "a", "b"] + [f"x{i}" for i in range(len(w.staged))] + \
        (["view_shape"] if group.epi_view is not None else []) + [p for p, _ in w.scalar_args]
    lines = [f"def _launch_{group.name}({', '.join(params)}):",
             f'    """Matmul kernel {name}: {mm.op} with a fused epilogue ({len(group.nodes) - 1} ops)."""',
             f"    if a.dim() != {a.rank} or b.dim() != {b.rank} or a.shape[-1] != b.shape[-2]:",
             f'        raise ValueError(f"{name}: cannot multiply {{tuple(a.shape)}} by {{tuple(b.shape)}}")',
             "    M, K = a.shape[-2], a.shape[-1]",
             "    N = b.shape[-1]",
             f"    batch = a.shape[0] if {batched} else 1",
             f"    D = {'(batch, M, N)' if batched else '(M, N)'}  # the matmul result",
             "    numel = math.prod(D)"]
    if group.epi_view is not None:
        lines.append("    E = _resolve_shape(view_shape, numel)  # the view the epilogue continues on")
    library = (_library_epilogue(group, w.staged, outs)
               if library_epilogue and len(part.groups) > 1 else None)
    if library:
        lines.append("    bias = x0  # the product's only epilogue: cuBLAS adds it (addmm)" if library == "bias"
                     else f"    bias = x0  # the product's only epilogue: bias and {library}, cuBLASLt's own")
    for i, (x, kind) in enumerate(w.staged):
        lines.append(f"    x{i} = x{i}.expand({'E' if kind == 'E' else 'D'}).reshape(D)  # {x.name}: broadcast, a view when possible")
    for o, y in enumerate(outs):
        lines.append(f"    y{o} = torch.empty(D, device=device, dtype={y.dtype})  # {y.name}")
    ret_items = []
    for o, y in enumerate(outs):
        ret_items.append(f"y{o}.view(E)" if group.epi_view is not None and y.shape != group.domain else f"y{o}")
    ret = "    return " + ", ".join(ret_items) + ("," if len(outs) == 1 else "")
    product = "torch.bmm" if batched else "torch.mm"
    lines += ["    if numel == 0:", "    " + ret,
              f'    cfg = _launch_config("{name}", "matmul", N, M, K)']
    if library and library != "bias":
        # cuBLASLt takes the epilogue for two rows or more; with one, torch's _addmm_activation
        # would copy the bias, multiply, then run the activation as a third kernel
        lines += ['    if cfg.get("BACKEND", "triton") == "cublas" and M > 1:',
                  f"        # bias and {library} are the whole epilogue: cuBLASLt applies them to the",
                  "        # accumulator as it writes the result (no second pass over the product)",
                  f"        torch._addmm_activation(bias, a, b, use_gelu={library == 'gelu_tanh'}, out=y0)",
                  "    " + ret]
    lines.append('    if cfg.get("BACKEND", "triton") == "cublas":')
    if not _has_epilogue(group) and len(outs) == 1:
        lines += ["        # the bare product through torch (cuBLAS on a GPU); nothing to fuse after it",
                  f"        {product}(a, b, out=y0)",
                  "    " + ret]
    elif library == "bias":
        lines += ["        # a bias is the whole epilogue: cuBLAS's own (one pass, as eager's linear)",
                  "        torch.addmm(bias, a, b, out=y0)",
                  "    " + ret]
    else:
        lines += [
              "        # the bare product through torch (cuBLAS on a GPU; TF32 as the case's precision set it),",
              "        # then the kernel runs only the fused epilogue: one read of the product, one write",
              "        p = torch.empty(D, device=device, dtype=a.dtype)",
              f"        {product}(a, b, out=p)",
              "        p_args = (p, p.stride(0) if p.dim() == 3 else 0, p.stride(-2), p.stride(-1))",
              "        # a memory-bound walk: 64x128 tiles of contiguous rows, 16-byte vector loads",
              '        cfg.update(BLOCK_M=min(64, max(16, _pow2(M))),',
              '                   BLOCK_N=min(128, max(16, _pow2(N))), num_warps=8, num_stages=1)']
    lines += [
              "    else:",
              "        p_args = (a, 0, 0, 0)  # unused: the kernel multiplies A by B itself",
              '    grid = (_cdiv(M, cfg["BLOCK_M"]) * _cdiv(N, cfg["BLOCK_N"]), batch)']
    sb = "a.stride(0)" if batched else "0"
    sbb = "b.stride(0)" if batched else "0"
    xs = "".join(f" x{i}, *x{i}.stride()," for i in range(len(w.staged)))
    ys = "".join(f" y{o}, *y{o}.stride()," for o in range(len(outs)))
    scal = "".join(f" {p}," for p, _ in w.scalar_args)
    lines += [f"    {name}[grid](",
              f"        a, {sb}, a.stride(-2), a.stride(-1), b, {sbb}, b.stride(-2), b.stride(-1), *p_args,{xs}{ys}",
              f"        M, N, K,{scal} BLOCK_M=cfg[\"BLOCK_M\"], BLOCK_N=cfg[\"BLOCK_N\"], BLOCK_K=cfg[\"BLOCK_K\"],",
              '        GROUP_M=cfg["GROUP_M"], UPCAST=_INTERPRETED and a.dtype == torch.bfloat16,',
              '        PRODUCT_IN=cfg.get("BACKEND", "triton") == "cublas",',
              '        num_warps=cfg["num_warps"], num_stages=cfg["num_stages"])',
              ret]
    call = ["device", f"@{a.name}", f"@{b.name}"] + [f"@{x.name}" for x, _ in w.staged]
    if group.epi_view is not None:
        call.append(f"%{group.epi_view.name}")
    call += [f"!{code}" for _, code in w.scalar_args]
    half = a.dtype in (torch.float16, torch.bfloat16)
    config = {"BACKEND": matmul_backend(group, part, precision), "BLOCK_M": 128, "BLOCK_N": 256 if half else 128,
              "BLOCK_K": 64 if half else 32, "GROUP_M": 8, "num_warps": 8, "num_stages": 3}
    # BACKEND first: the accelerator always tries both where cublas is allowed
    tunables = {"BACKEND": ["triton", "cublas"] if _cublas_allowed(group, part) else ["triton"],
                "BLOCK_M": [64, 128], "BLOCK_N": [64, 128, 256], "BLOCK_K": [32, 64],
                "GROUP_M": [8], "num_warps": [4, 8], "num_stages": [3, 4]}
    return KernelSource(name, f"_launch_{group.name}", "matmul", "\n".join(kernel) + "\n",
                        "\n".join(lines) + "\n", call, _origins(group), tunables,
                        config, w.helpers, library)


def _has_epilogue(group: Group) -> bool:
    return any(n is not group.anchor and n.op not in LAYOUT for n in group.nodes)


LIBRARY_ACTIVATIONS = {"relu": (torch.float32, torch.float16, torch.bfloat16),
                       "gelu_tanh": (torch.float16, torch.bfloat16)}
"""Activations cuBLASLt applies in a product's epilogue after its bias
(`torch._addmm_activation`), by the dtypes it is exact enough for: ReLU is exact; its GELU is
the tanh form, evaluated on the float32 accumulator before the one rounding to a 16-bit result
(a float32 result is left to the Triton epilogue, which evaluates torch's own formula)."""


COPIES = ("identity", "clone", "alias", "lift_fresh_copy")
"""Ops whose value is their input's (graph.py lowers clone and alias to identity)."""


def _library_epilogue(group: Group, staged: list[tuple[Node, str]], outs: list[Node]) -> str | None:
    """What cuBLAS can do of a 2-D product's epilogue on its own: `"bias"` when the epilogue
    is one bias add (a vector along N, in the product's dtype), whose result (or a view of it)
    is the group's one output -- `torch.addmm` adds it in the product's own epilogue instead of
    a second pass over the result (GPT-2's QKV projection on an H200: a 0.018 ms Triton pass;
    eager has none); the activation's op (`LIBRARY_ACTIVATIONS`) when that bias add is followed
    by ReLU or tanh-GELU and nothing else -- `torch._addmm_activation` runs both in cuBLASLt's
    epilogue (GPT-2's MLP: the product's Triton pass over 8192x3072 was 0.031 ms, H200). None
    otherwise (the product, then one Triton pass for the epilogue)."""
    mm = group.anchor
    rest = [n for n in group.nodes if n is not mm and n.op not in LAYOUT]
    copies = []  # a trailing clone (a dropout of p=0 in training mode): the result is fresh anyway
    while len(rest) > 1 and rest[-1].op in COPIES and rest[-1].args and rest[-1].args[0] is rest[-2]:
        copies.insert(0, rest.pop())
    if mm is None or mm.op != "mm" or not 1 <= len(rest) <= 2 or len(staged) != 1 or len(outs) != 1:
        return None
    add, (vec, _kind) = rest[0], staged[0]
    if add.op != "add" or sorted(map(id, add.args)) != sorted((id(mm), id(vec))):
        return None
    act = rest[1] if len(rest) == 2 else None
    last = act or add
    view = group.epi_view  # (the one view the epilogue may continue on)
    if act is not None and (act.op not in LIBRARY_ACTIVATIONS or len(act.args) != 1 or act.kwargs
                            or not (act.args[0] is add or view is not None and act.args[0] is view
                                    and view.args[0] is add)):
        return None
    last = copies[-1] if copies else last
    if outs[0] is not last and not (outs[0] is view and view.args[0] is last):
        return None
    dtype = mm.args[0].dtype
    if act is not None and dtype not in LIBRARY_ACTIVATIONS[act.op]:
        return None
    if not (vec.dtype == add.dtype == last.dtype == outs[0].dtype == dtype
            and vec.shape[-1] == mm.shape[-1] and (vec.rank == 1 or vec.rank == 2 and vec.shape[0] == 1)):
        return None
    return act.op if act is not None else "bias"


def _cublas_allowed(group: Group, part: Partition) -> bool:
    """A product through torch keeps the candidate honest only when Triton still computes
    something: this group's epilogue, or other kernels of the model (a model that is one bare
    product would otherwise be the baseline's own op)."""
    return _has_epilogue(group) or len(part.groups) > 1


def matmul_backend(group: Group, part: Partition, precision: str = "strict") -> str:
    """The default BACKEND of a matmul group: `cublas` (torch product + Triton epilogue kernel)
    for a large product or any float32 product at `strict` precision, else `triton` (one fused
    kernel).

    H100, 2026-11-22 (benchmarks/offline_gpu.py): linear_bias_gelu 1.734 ms cublas vs 1.893
    triton; gated_mlp 3.395 vs 4.100; matmul_scale_residual (tf32) 0.888 vs 1.296. Strict
    float32 (no TF32: `tl.dot(..., input_precision="ieee")`): Triton's template lost to cuBLAS
    on every lone product of KernelBench level 1 (4x H100, 2026-11-27: 0.84-0.92x of cuBLAS on
    square shapes, 0.38-0.57x on irregular and transposed-B ones), and ViT's 25 small fp32
    linears left its forward at 0.42x of eager (H200, 2026-11-27). The extra pass of the
    epilogue kernel over the product is cheap beside that, and with the forward replayed as a
    CUDA graph its launch costs nothing on the host. The accelerator still measures both on
    the user's GPU."""
    if not _cublas_allowed(group, part):
        return "triton"
    return "cublas" if library_product(group.anchor, precision) else "triton"

