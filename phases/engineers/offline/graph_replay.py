"""A generated forward replayed as one CUDA graph: the runtime part of the candidate file.

A network of many small layers (MobileNet, ResNet-101 at batch 10, a transformer block at a
short sequence) spends its forward on the host: every Triton launch costs ~17 us of Python
and driver work on an H200 (an aten op ~8 us), far more than the kernel itself. Measured on
one H200 (torch 2.11, triton 3.6, `benchmarks/launch_gpu.py`, 2026-11-27, torch's default
precision: cuDNN convolutions in TF32): ResNet-101's generated forward took 13.98 ms launched
op by op and **3.19 ms replayed from a graph** (eager 8.72 ms, eager replayed 3.67 ms,
torch.compile 8.84 ms). At the harness's `strict` precision (no TF32) its convolutions make it
GPU-bound: 7.84 ms replayed, against eager's 8.76 ms (`kopt suite`'s timer, same day).

The candidate's `forward` calls `_graphed(self, self._kopt_forward, args)`, which captures the
forward once per key (input shapes, strides and dtypes, the storage of every weight it
reads, the region switches) and replays it from the next call on (the first runs op by op,
then captures): inputs are copied into the graph's own buffers, outputs cloned out of them,
so every call reads the values it was given, and a result stays valid after the next call.
Inputs that come again at the addresses of one of the last MAX_GRAPHS calls (a serving
loop's buffers, a pipeline rotating a few input buffers, a timer refilling its inputs in place)
get a graph of that key captured over their memory itself, up to MAX_GRAPHS such addresses a
key: its replays read the inputs where they are, with no copy in (GPT-2's block at
8x1024x768 bf16: 12.6 MB, about 6 us of its 0.32 ms on an H200). Other addresses take the
copying graph. Where copying the inputs would cost more than the graph saves but cloning the
outputs would not (a small loss over large logits), only graphs over input memory are kept:
inputs at new addresses run op by op.
Each call runs one forward's work, which is what the verifier counts. A weight replaced, moved or written in place (`load_state_dict`)
changes the key, so the next call captures again: what the forward derives from a weight on
the host (a channels_last copy kept between calls) is made anew.

It runs op by op instead where a graph cannot help or cannot hold:
- without a GPU (Triton's interpreter), under `torch.compile` (dynamo traces the forward),
  for inputs on a GPU other than the current one (a graph captures on the current device),
  for an input whose memory overlaps itself (an expanded view cannot be copied into);
- when cloning the outputs (and, for the copying graph, copying the inputs) would cost more
  than half the host time the graph saves (`_graph_pays`): a memory-bound forward over a
  large tensor (a softmax over 1 GB) gains nothing from a graph and would pay extra passes. A small forward of one Triton
  kernel beside a library call does gain (a 128x16x30x30 convolution's epilogue on an H200:
  0.152 ms a call op by op, 0.033 replayed, eager 0.056), since a Triton launch costs several
  aten ops' host time;
- when capture fails (an op that synchronises with the host): that key runs op by op from
  then on.
Why a key runs op by op is kept in its place in `_kopt_graphs` (a string); `graph_report`
reads it for the bench job's row. Such a verdict is also remembered by the inputs' form alone
(`_kopt_op_by_op`, the last 4 * MAX_GRAPHS forms), so a forward that never replays does not
build the full key (every weight's pointer and version) on each call; a capture that failed is
not tried again after new weights.
`KOPT_GRAPH = False` in the file turns it off. The verifier sees a replay's work: the Triton
launches and the aten ops captured are counted again at every replay
(`harness.verification.guards.GraphWatch`).
"""

from __future__ import annotations

HOST_US_PER_STEP = 8.0
"""Host time a forward step costs when launched from Python: an aten op ~8 us on an H200 with
torch 2.11 / triton 3.6 (a library call more), the lower bound, so the estimate of what a graph
saves is conservative. The replay's own steps (the replay, each copy in and clone out) count
at this rate too."""

TRITON_LAUNCH_US = 30.0
"""Host time of one Triton launch from Python through the candidate's launcher (its checks,
strides and grid, then `kernel[grid](...)`, which binds and specialises every argument). On an
H200 (torch 2.11, triton 3.6): ~17 us for a kernel of few arguments (2026-11-27); 2026-12-02,
`benchmarks/host_overhead_gpu.py`, a convolution's 20-argument epilogue kernel: its forward
(the convolution, a view, the kernel) took 0.088 ms a call op by op against 0.047 replayed,
on 0.022 ms of device time, and the harness timer read 0.152 ms against 0.033."""

COPY_BYTES_PER_US = 1.5e6
"""Bytes per microsecond a device-to-device copy moves, read and write counted (a third of an
H100's bandwidth: small copies do not reach peak)."""

MAX_GRAPHS = 4
"""Graphs kept per module (they share one memory pool); the oldest goes first."""

_RUNNER = '''
def _graph_pays(copy_bytes, copies):
    """Whether the copies of a replay (copy_bytes in `copies` copies, in and out) cost less
    than half the host time it saves: FORWARD_STEPS steps at HOST_US_PER_STEP each, of which
    FORWARD_TRITON are Triton launches at TRITON_LAUNCH_US, less the replay's own steps (the
    copies and the replay itself)."""
    host_us = FORWARD_STEPS * HOST_US_PER_STEP + FORWARD_TRITON * (TRITON_LAUNCH_US - HOST_US_PER_STEP)
    saved_us = host_us - (copies + 1) * HOST_US_PER_STEP
    return copy_bytes / COPY_BYTES_PER_US < 0.5 * saved_us


def _dense(t):
    """A tensor whose elements each have their own memory (an expanded view does not)."""
    return (t.is_contiguous() or t.is_contiguous(memory_format=torch.channels_last)
            or t.is_contiguous(memory_format=torch.channels_last_3d))


def _input_form(args):
    """The inputs' shapes, strides, dtypes and devices and the region switches: the cheap part
    of a graph's key, and all that decides whether copies would cost more than a graph saves."""
    shapes = tuple((a.shape, a.stride(), a.dtype, a.device) if isinstance(a, torch.Tensor)
                   else a for a in args)
    return shapes, tuple(KOPT_REGIONS.values())


def _graph_key(module, form):
    """What a captured graph depends on besides the input values (copied in at each replay):
    the inputs' form; every weight's storage and version (a weight written in place, as
    load_state_dict does, is read by the replay, but a copy derived from it on the host, such
    as a channels_last weight, would not be remade)."""
    weights = tuple((t.data_ptr(), t._version) for slot in module._kopt_state
                    for t in slot.values() if t is not None)
    return form, weights


def _clone_out(out):
    """The outputs with each tensor cloned (a value that is not a tensor is the same)."""
    if isinstance(out, torch.Tensor):
        return out.clone()
    if isinstance(out, (list, tuple)):
        return type(out)(_clone_out(o) for o in out)
    return out


def _out_tensors(out):
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (list, tuple)):
        return [t for o in out for t in _out_tensors(o)]
    return []


def _captured(graph, pool, fn, args):
    """fn(*args) captured into graph. torch.cuda.graph's exit ends the capture before it puts
    the caller's stream back, so a capture that fails there (an op that synchronised with the
    host, a launch the capture would not take) would leave its side stream current for every
    later op of the caller: the caller's stream is put back here whatever happened."""
    caller = torch.cuda.current_stream()
    try:
        with torch.cuda.graph(graph, pool=pool, capture_error_mode="thread_local"):
            return fn(*args)
    finally:
        torch.cuda.set_stream(caller)


def _pool(module):
    """The memory pool the module's graphs share. A pool no kept graph uses any more (the last
    one evicted) is gone: capturing into its handle fails in the allocator
    (`it->second->use_count > 0`, torch 2.11), so a fresh one is made then."""
    live = any(isinstance(e, tuple) and (e[0] is not None or any(e[3].values()))
               for e in module._kopt_graphs.values())
    if module._kopt_pool is None or not live:
        module._kopt_pool = torch.cuda.graph_pool_handle()
    return module._kopt_pool


def _nbytes(tensors):
    return sum(t.numel() * t.element_size() for t in tensors)


def _capture(module, fn, args):
    """The first call of a key: fn(*args) op by op (Triton compiles, cuDNN and cuBLAS
    initialise here), then fn captured over copies of args where copying the inputs in and
    the outputs out pays. Returns (that result, the entry): (graph, static inputs, static
    outputs, graphs over input memory by address), with no copying graph (None) where only a
    graph over the inputs' own memory pays (its outputs' clones alone), or why the key runs
    op by op (a string: no graph would pay, or capture failed). A module's graphs share one
    memory pool: each replay writes its intermediates before reading them and its outputs are
    cloned at once, so the pool holds about one forward's memory plus each graph's outputs."""
    first = fn(*args)
    ins = [a for a in args if isinstance(a, torch.Tensor)]
    outs = _out_tensors(first)
    if not _graph_pays(_nbytes(ins) + _nbytes(outs), len(ins) + len(outs)):
        if _graph_pays(_nbytes(outs), len(outs)):
            return first, (None, None, None, {})
        return first, "copies cost more than the host time saved"
    static = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
    graph = torch.cuda.CUDAGraph()
    try:
        out = _captured(graph, _pool(module), fn, static)
    except Exception as err:  # noqa: BLE001 (an op that syncs with the host cannot be captured)
        return first, f"capture failed: {type(err).__name__}: {err}"[:300]
    return first, (graph, static, out, {})


def _capture_direct(module, fn, args):
    """fn captured over args themselves (not copies): (graph, outputs), or None where capture
    fails. Its replay reads whatever the inputs' memory holds then, so it serves any later
    call whose inputs have the same addresses, shapes and strides (the memory is the caller's
    and alive while the caller passes it)."""
    graph = torch.cuda.CUDAGraph()
    try:
        out = _captured(graph, _pool(module), fn, args)
    except Exception:  # noqa: BLE001 (the copying graph, or op by op, still serves these inputs)
        return None
    return graph, out


def _graphed(module, fn, args):
    """fn(*args), replayed from a CUDA graph where one pays and can be captured."""
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    if (not KOPT_GRAPH or _INTERPRETED or torch.compiler.is_compiling() or not tensors
            or tensors[0].device.type != "cuda"
            or tensors[0].device.index not in (None, torch.cuda.current_device())
            or not all(_dense(t) for t in tensors) or not _graph_pays(0, 1)):
        return fn(*args)
    form = _input_form(args)
    if form in module._kopt_op_by_op:
        # a verdict of op by op (no graph pays, or capture failed) holds for this input form
        # whatever the weights: the key, which reads every weight, is not built again
        return fn(*args)
    graphs = module._kopt_graphs
    key = _graph_key(module, form)
    ptrs = tuple(t.data_ptr() for t in tensors)
    recent = module._kopt_recent_inputs
    seen = ptrs in recent
    if not seen:
        recent.append(ptrs)
        del recent[:-MAX_GRAPHS]
    if key not in graphs:
        if len(graphs) >= MAX_GRAPHS:
            graphs.pop(next(iter(graphs)))
        first, graphs[key] = _capture(module, fn, args)
        if isinstance(graphs[key], str):
            module._kopt_op_by_op[form] = None
            for stale in list(module._kopt_op_by_op)[:-4 * MAX_GRAPHS]:
                del module._kopt_op_by_op[stale]
        return first  # one forward's work ran (the capture itself runs nothing)
    entry = graphs[key]
    if isinstance(entry, str):  # op by op, and why (`graph_report` reads it)
        return fn(*args)
    graph, static, out, direct = entry
    hit = direct.get(ptrs)
    if hit:
        hit[0].replay()  # reads the inputs where they are: nothing copied in
        return _clone_out(hit[1])
    if seen and hit is None and len(direct) < MAX_GRAPHS:
        # input memory of a recent call again (a serving loop's buffers, a timer rotating a
        # few input sets): a graph over that memory itself saves the copy in
        made = _capture_direct(module, fn, args)
        direct[ptrs] = made if made is not None else False  # (False: not tried again)
        if made is not None:
            made[0].replay()
            return _clone_out(made[1])
    if graph is None:  # only a graph over input memory pays, and these inputs have none yet
        return fn(*args)
    for s, a in zip(static, args):
        if isinstance(s, torch.Tensor):
            s.copy_(a)
    graph.replay()
    return _clone_out(out)
'''


def forward_host_us(steps: int, triton: int, step_us: float = HOST_US_PER_STEP,
                    launch_us: float = TRITON_LAUNCH_US) -> float:
    """Host time of a forward run op by op: `steps` steps at `step_us`, `triton` of them
    Triton launches at `launch_us`. The candidate's `_graph_pays` computes the same from its
    own constants (the runner is written into the file and imports nothing of kopt)."""
    return steps * step_us + triton * (launch_us - step_us)


def graph_constants(steps: int, triton: int) -> list[str]:
    """The candidate's module-level constants for `_graphed` (a forward of `steps` steps, of
    which `triton` are Triton launches)."""
    return [
        "# The forward replays as one CUDA graph where the input and output copies cost less than",
        "# the host time it saves (an aten op from Python is ~8 us, a Triton launch ~17-50 us);",
        "# False runs it op by op.",
        "KOPT_GRAPH = True",
        f"FORWARD_STEPS = {steps}",
        f"FORWARD_TRITON = {triton}",
        f"HOST_US_PER_STEP = {HOST_US_PER_STEP}",
        f"TRITON_LAUNCH_US = {TRITON_LAUNCH_US}",
        f"COPY_BYTES_PER_US = {COPY_BYTES_PER_US}",
        f"MAX_GRAPHS = {MAX_GRAPHS}",
    ]


def graph_runner() -> str:
    """The candidate's `_graphed` and its helpers (reads the constants above)."""
    return _RUNNER
