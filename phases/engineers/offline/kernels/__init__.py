"""Triton source for one fusion group: the `@triton.jit` kernel and its launcher.

One template per file, sharing one expression writer (`writer.py`):
- `pointwise.py`: a flat 1-D walk of the domain;
- `reduction.py`: one program per row of the reduced dim (one pass in registers, or loops
  over column blocks with online max/sum and one-load selects);
- `matmul.py`: the tiled matmul with its pointwise epilogue;
- `convolution.py`: a convolution (1-3-D, transposed, grouped) as an implicit GEMM;
- `scan.py`: a cumulative sum or product along one dim, one program per row;
- `arg_reduction.py`: argmax / argmin along one dim, one program per row;
- `attention.py`: softmax(chain(q @ kt)) @ v with a running softmax, the scores on chip.
"""

from __future__ import annotations

from kopt.phases.engineers.offline.kernels.arg_reduction import arg_reduction_kernel
from kopt.phases.engineers.offline.kernels.attention import attention_kernel
from kopt.phases.engineers.offline.kernels.convolution import conv_flops, conv_kernel
from kopt.phases.engineers.offline.kernels.matmul import matmul_backend, matmul_kernel
from kopt.phases.engineers.offline.kernels.pointwise import pointwise_kernel
from kopt.phases.engineers.offline.kernels.reduction import ROW_BLOCK, ROW_TILE, reduction_kernel
from kopt.phases.engineers.offline.kernels.scan import scan_kernel
from kopt.phases.engineers.offline.kernels.writer import KernelSource, kernel_label

__all__ = ["ROW_BLOCK", "arg_reduction_kernel", "attention_kernel", "conv_flops", "conv_kernel", "ROW_TILE", "KernelSource", "kernel_label", "matmul_backend", "matmul_kernel",
           "pointwise_kernel", "reduction_kernel", "scan_kernel"]
