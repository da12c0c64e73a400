"""The attention template: one program per block of query rows of one (batch, head), walking
the keys in blocks with a running softmax (flash attention's forward), the score chain of the
model (`attention.ScoreChain`: a scale, a mask, a bias) applied to each block of scores.

Rows and keys are read through strides: q (batch, M, D), kt (batch, D, N) and v (batch, N, DV)
as the two products had them, the batch split into (outer, head) by H so that a mask or bias
of the 4-D scores (B, H, M, N), broadcast, is indexed where it lies. Scores stay in float32;
the second product takes the probabilities in the inputs' dtype, as eager's does.
"""

from __future__ import annotations

from typing import Any

import torch

from kopt.harness.errors import EngineerError
from kopt.phases.engineers.offline.attention import ScoreChain, constant
from kopt.phases.engineers.offline.fusion import Group, Partition
from kopt.phases.engineers.offline.graph import Node, Sym
from kopt.phases.engineers.offline.kernels.writer import (
    KernelSource,
    _n_operands,
    _origins,
    _store_type,
    _Writer,
    float32_dot,
)
from kopt.phases.engineers.offline.pointwise import (
    TL_TYPES,
    Operand,
    compute_type,
    emit_pointwise,
    literal,
)


class _AttentionWriter(_Writer):
    """Emits the score chain on the block `s` of (BLOCK_M, BLOCK_N) scores."""

    def __init__(self, group: Group, part: Partition, sym_code: Any) -> None:
        super().__init__(group, part, sym_code)
        self.node = group.anchor
        self.chain: ScoreChain = self.node.kwargs["chain"]
        self.values: dict[int, Operand] = {id(self.chain.score): Operand("s", "tl.float32")}
        self.external_index = {id(e): i for i, e in enumerate(self.chain.externals)}

    def chain_operand(self, a: Any) -> Operand:
        if isinstance(a, Node):
            got = self.values.get(id(a))
            if got is not None:
                return got
            i = self.external_index.get(id(a))
            if i is not None:
                return self.external(i)
            if constant(a):
                return Operand(literal(a.args[0]), None, a.args[0])
            raise EngineerError(f"internal: the attention chain reads {a.name}, which it cannot load")
        if isinstance(a, Sym):
            return self.scalar(a)
        return Operand(literal(a), None, a)

    def external(self, i: int) -> Operand:
        x = self.chain.externals[i]
        var = f"e{i}"
        if id(x) not in self.values:
            self.emit(f"{var} = tl.load(x{i}_ptr + b * x{i}_sb + h * x{i}_sh + rm[:, None] * x{i}_sm"
                      f" + rn[None, :] * x{i}_sn, mask=in_block, other=0)  # {x.name}")
            ct = compute_type(x.dtype)
            if TL_TYPES[x.dtype] != ct:
                self.emit(f"{var} = {var}.to({ct})")
            self.values[id(x)] = Operand(var, ct)
        return self.values[id(x)]

    def write_chain(self) -> str:
        """Emits the chain; returns the softmax input's variable (float32)."""
        for n in self.chain.nodes:
            ops = [self.chain_operand(a) for a in n.args[:_n_operands(n)]]
            text = emit_pointwise(n.op, ops, n.dtype, n.args[_n_operands(n):], self.helpers)
            var = self.fresh("c")
            self.emit(f"{var} = {text}  # {n.origin}: {n.op}")
            self.values[id(n)] = Operand(var, compute_type(n.dtype))
        last = self.chain.nodes[-1] if self.chain.nodes else self.chain.score
        return self.values[id(last)].as_type("tl.float32")


def _is_minus_inf(a: Any) -> bool:
    if isinstance(a, float):
        return a == float("-inf")
    return isinstance(a, Node) and constant(a) and a.args[0] == float("-inf")


def _mask_gate(w: _AttentionWriter) -> str | None:
    """When the softmax's input is `where(cond, -inf, y)` (or `where(cond, y, -inf)`) with
    `cond` a tensor loaded as it is (a causal mask), the load of it (emitted now) and the
    boolean block of keys it leaves visible; else None."""
    chain = w.chain
    if not chain.nodes:
        return None
    last = chain.nodes[-1]
    if last.op != "where" or len(last.args) != 3 or not isinstance(last.args[0], Node):
        return None
    i = w.external_index.get(id(last.args[0]))
    if i is None or last.args[0].dtype != torch.bool:
        return None
    cond = w.external(i).text
    if _is_minus_inf(last.args[1]):
        return f"({cond} == 0)"
    if _is_minus_inf(last.args[2]):
        return f"({cond} != 0)"
    return None


def attention_kernel(group: Group, part: Partition, sym_code: Any, name: str, precision: str) -> KernelSource:
    """The kernel and launcher of an attention group (one node: `attention.fuse_attention`)."""
    w = _AttentionWriter(group, part, sym_code)
    node, chain = w.node, w.chain
    q, kt, v = node.args[:3]
    w.indent = 2
    gate = _mask_gate(w)
    gate_lines, w.lines = w.lines, []
    x = w.write_chain()
    body = w.lines
    half = q.dtype in (torch.float16, torch.bfloat16)
    dot_kw = float32_dot(q.dtype, precision)
    to_v = "p"
    if q.dtype == torch.bfloat16:
        w.helpers.add("_to_bf16")
        to_v = "_to_bf16(p).to(tl.float32) if UPCAST else p.to(tl.bfloat16)"
    elif q.dtype == torch.float16:
        to_v = "p.to(tl.float16).to(tl.float32) if UPCAST else p.to(tl.float16)"
    if node.dtype == torch.bfloat16:
        w.helpers.add("_to_bf16")
        store = "_to_bf16(out)"
    else:
        store = f"out.to({_store_type(node.dtype)})"
    n_ext = len(chain.externals)
    kernel = [
        "@triton.jit",
        f"def {name}(",
        f"    q_ptr, q_sb, q_sh, q_sm, q_sd,  # (batch, M, D) {str(q.dtype)[6:]}: {q.name}",
        f"    k_ptr, k_sb, k_sh, k_sd, k_sn,  # (batch, D, N): {kt.name}",
        f"    v_ptr, v_sb, v_sh, v_sn, v_sd,  # (batch, N, DV): {v.name}",
        "    # the score chain's tensors, broadcast to the scores (stride 0 where broadcast)",
    ]
    for i, e in enumerate(chain.externals):
        kernel.append(f"    x{i}_ptr, x{i}_sb, x{i}_sh, x{i}_sm, x{i}_sn,  # {e.name}")
    kernel += [
        f"    o_ptr, o_sb, o_sm, o_sd,  # (batch, M, DV) {str(node.dtype)[6:]}, contiguous",
        f"    H, M, N, D, DV,{''.join(f' {p},' for p, _ in w.scalar_args)}",
        "    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr,",
        "    UPCAST: tl.constexpr,  # True only under the CPU interpreter, whose 16-bit tl.dot is wrong",
        "):",
        "    # FLOPs: 4*batch*M*N*D (both products); bytes: q, k, v and the output once per row block",
        "    pid_m = tl.program_id(0)",
        "    bh = tl.program_id(1).to(tl.int64)",
        "    b = bh // H  # the batch splits into (outer, head) as the scores' leading dims do",
        "    h = bh % H",
        "    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)",
        "    rd = tl.arange(0, BLOCK_D)",
        "    rdv = tl.arange(0, BLOCK_DV)",
        "    q = tl.load(q_ptr + b * q_sb + h * q_sh + rm[:, None] * q_sm + rd[None, :] * q_sd,",
        "                mask=(rm[:, None] < M) & (rd[None, :] < D), other=0.0)",
        "    if UPCAST:",
        "        q = q.to(tl.float32)",
        '    m_i = tl.full([BLOCK_M], -float("inf"), tl.float32)  # running row maximum',
        "    l_i = tl.zeros([BLOCK_M], tl.float32)  # running row sum of exp(score - m_i)",
        "    acc = tl.zeros([BLOCK_M, BLOCK_DV], tl.float32)",
        "    for start in range(0, N, BLOCK_N):",
        "        rn = start + tl.arange(0, BLOCK_N)",
        "        in_block = (rm[:, None] < M) & (rn[None, :] < N)",
    ]
    step = [
        "        kt = tl.load(k_ptr + b * k_sb + h * k_sh + rd[:, None] * k_sd + rn[None, :] * k_sn,",
        "                     mask=(rd[:, None] < D) & (rn[None, :] < N), other=0.0)",
        "        if UPCAST:",
        "            kt = kt.to(tl.float32)",
        f"        s = tl.dot(q, kt{dot_kw})",
        "        # the model's ops on its scores: " + (", ".join(n.origin for n in chain.nodes)[:120] or "none"),
    ]
    step += body
    step += [
        f'        x = tl.where(rn[None, :] < N, {x}, -float("inf"))',
        "        m_new = tl.maximum(m_i, tl.max(x, 1))",
        "        m_use = tl.where(m_new == -float(\"inf\"), 0.0, m_new)  # a row masked so far",
        "        alpha = tl.exp(m_i - m_use)",
        "        p = tl.exp(x - m_use[:, None])",
        "        l_i = l_i * alpha + tl.sum(p, 1)",
        "        v = tl.load(v_ptr + b * v_sb + h * v_sh + rn[:, None] * v_sn + rdv[None, :] * v_sd,",
        "                    mask=(rn[:, None] < N) & (rdv[None, :] < DV), other=0.0)",
        "        if UPCAST:",
        "            v = v.to(tl.float32)",
        f"        acc = acc * alpha[:, None] + tl.dot({to_v}, v{dot_kw})",
        "        m_i = m_new",
    ]
    if gate is None:
        kernel += step
    else:  # a block the mask hides whole adds nothing: neither product runs for it
        kernel += gate_lines + [f"        if tl.sum(({gate} & in_block).to(tl.int32)) > 0:  # a key it sees"]
        kernel += ["    " + line for line in step]
    kernel += [
        "    out = acc / l_i[:, None]  # a row masked everywhere is 0/0 = nan, as eager's softmax",
        "    tl.store(o_ptr + bh * o_sb + rm[:, None] * o_sm + rdv[None, :] * o_sd,",
        f"             {store}, mask=(rm[:, None] < M) & (rdv[None, :] < DV))",
    ]
    four = chain.score.rank == 4
    # the heads: a 4-D operand's own size at run time, else what the scores' view split into
    split, size = chain.heads(node)
    heads = f"{('q', 'kt', 'v')[split]}.shape[1]" if split is not None else "heads" if four else "1"
    params = ["device", "q", "kt", "v"] + [f"x{i}" for i in range(n_ext)] + \
        (["heads"] if heads == "heads" else []) + [p for p, _ in w.scalar_args]
    lines = [f"def _launch_{group.name}({', '.join(params)}):",
             f'    """Attention kernel {name}: softmax(chain(q @ kt)) @ v, the scores kept on chip."""',
             "    batch, (M, D), N, DV = math.prod(q.shape[:-2]), q.shape[-2:], kt.shape[-1], v.shape[-1]",
             "    if kt.shape[-2] != D or v.shape[-2] != N or math.prod(kt.shape[:-2]) != batch or \\",
             "            math.prod(v.shape[:-2]) != batch:",
             f'        raise ValueError(f"{name}: q {{tuple(q.shape)}}, kt {{tuple(kt.shape)}} and v {{tuple(v.shape)}} '
             'do not make an attention")',
             f"    H = {heads}",
             "    # (outer, head, row, col) strides: a 3-D operand's batch splits by H",
             "    qs, ks, vs = (t.stride() if t.dim() == 4 else (H * t.stride(0), *t.stride()) for t in (q, kt, v))",
             f"    out = torch.empty((batch, M, DV), device=device, dtype={node.dtype})",
             "    if out.numel() == 0:",
             "        return out,",
             "    scores = (batch // H, H, M, N)" if four else "    scores = (batch, M, N)"]
    for i in range(n_ext):
        lines.append(f"    x{i} = x{i}.expand(scores)  # broadcast: stride 0 where it repeats")
        if four:
            lines.append(f"    x{i}_s = x{i}.stride()")
        else:
            lines.append(f"    x{i}_s = (x{i}.stride(0), 0, x{i}.stride(1), x{i}.stride(2))")
    lines += [f'    cfg = _launch_config("{name}", "attention", N, M, D)',
              "    block_d, block_dv = max(16, _pow2(D)), max(16, _pow2(DV))",
              '    grid = (_cdiv(M, cfg["BLOCK_M"]), batch)',
              f"    {name}[grid](",
              "        q, *qs, kt, *ks, v, *vs,"]
    for i in range(n_ext):
        lines.append(f"        x{i}, *x{i}_s,")
    lines += ["        out, out.stride(0), out.stride(1), out.stride(2),",
              f"        H, M, N, D, DV,{''.join(f' {p},' for p, _ in w.scalar_args)}",
              '        BLOCK_M=cfg["BLOCK_M"], BLOCK_N=cfg["BLOCK_N"], BLOCK_D=block_d, BLOCK_DV=block_dv,',
              f"        UPCAST=_INTERPRETED and {half},",
              '        num_warps=cfg["num_warps"], num_stages=cfg["num_stages"])',
              "    return out,"]
    call = ["device", f"@{q.name}", f"@{kt.name}", f"@{v.name}"] + \
        [f"@{e.name}" for e in node.args[3:]]
    if heads == "heads":
        call.append(f"!{sym_code(size)}")
    call += [f"!{code}" for _, code in w.scalar_args]
    config = {"BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 4, "num_stages": 2}
    tunables = {"BLOCK_M": [32, 64, 128], "BLOCK_N": [16, 32, 64, 128], "num_warps": [4, 8],
                "num_stages": [1, 2, 3]}
    return KernelSource(name, f"_launch_{group.name}", "attention", "\n".join(kernel) + "\n",
                        "\n".join(lines) + "\n", call, _origins(group), tunables, config, w.helpers)
