"""``convolution`` as an implicit GEMM on the GEMM kernel (gemm.py): no im2col in memory.

A convolution is a batch of matrix products over its groups (feature or batch groups)::

    C[g][pixel, o] = sum_k patches[g][pixel, k] * kernel[g][k, o]

with ``pixel`` the output's batch and spatial positions, ``k`` an input feature and a
kernel position, ``o`` an output feature of the group. The kernel operand is read through
offset maps like any dot operand; the patch operand through a :class:`~.gemm.Window`: read
in place through row pointers (runs of input features) or packed with masks (padding and
lhs-dilation holes read as 0), so the input is never padded or expanded in memory
(docs/backend-cpu.md, "Convolution"). K is ordered as the kernel's memory is (its dims by decreasing
stride), so the kernel operand is usually one stride.

The orientation follows the output layout, so that C is the output itself, in place:

* output features innermost (NHWC, NWC...): rows are pixels (A = patches), columns output
  features (B = kernel), C's row stride the output's pixel stride;
* otherwise (NCHW...): rows are output features (A = kernel, read in place when K is one
  stride), columns the pixels whose dims merge into the output's contiguous tail (B =
  patches); an output batch dim that does not merge with them (NCHW's N) joins the GEMM's
  batch with the groups.

What this cannot express (a spatial dim that merges with neither, an empty output or
window, dtypes the GEMM does not compute) is refused by :func:`conv_refusal`, and the core
then expands the convolution into its im2col decomposition (docs/backend-cpu.md).
"""
from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

from axle.ir.module import Node

from .gemm import GEMM_DTYPES, GemmSpec, Layout, Offsets, Window


def _strides(shape: Sequence[int]) -> list[int]:
    return [math.prod(shape[d + 1:]) for d in range(len(shape))]


@dataclass(frozen=True)
class _Dim:
    """A pixel dim of the output: its size, strides in the output and the input, and its
    spatial dim (-1: the batch)."""

    size: int
    out_stride: int
    in_stride: int
    spatial: int


def _merging_tail(dims: Sequence[_Dim]) -> int:
    """How many of ``dims`` (by decreasing output stride) at the end merge into one
    stride in the output (size-1 dims merge with anything)."""
    count, inner = 0, None
    for d in reversed(dims):
        if d.size > 1:
            if inner is not None and d.out_stride != inner.out_stride * inner.size:
                break
            inner = d
        count += 1
    return count


def _feature_run(kdims: Sequence[tuple[int, int]], ksizes: Sequence[int], stride: int) -> dict[str, int]:
    """Window.run/run_stride: K's innermost dim (size-1 dims aside) when it is the input
    feature (-1), whose positions share their validity and are ``stride`` apart."""
    real = [(d, n) for (d, _), n in zip(kdims, ksizes) if n > 1]
    if real and real[-1][0] < 0:
        return {"run": real[-1][1], "run_stride": stride}
    return {}


def _feature_line(kdims: Sequence[tuple[int, int]], ksizes: Sequence[int], in_strides: Sequence[int]) -> dict[str, int]:
    """Window.line: K's innermost dims (size-1 dims aside) that lie consecutive
    in the input when inside it: the input feature's run (unit stride), if any, and the
    spatial dim just outside it when that dim's input step is the run's length (NHWC with
    HWIO: a 7x7 stem's kw and its 3 features, 21 floats). Along a line only that spatial
    position moves, so the line's valid positions are one interval."""
    real = [(d, n, s) for (d, _), n, s in zip(kdims, ksizes, in_strides) if n > 1]
    run, k = 1, len(real)
    if real and real[-1][0] < 0:
        if real[-1][2] != 1:
            return {}
        run, k = real[-1][1], k - 1
    if k == 0 or real[k - 1][0] < 0 or real[k - 1][2] != run:
        return {}
    return {"line": run * real[k - 1][1]}


class ConvRefused(Exception):
    """A convolution the implicit GEMM does not compute; the message says why."""


def conv_layout(node: Node) -> Layout:
    """The implicit-GEMM view of a convolution (the module docstring); raises
    :class:`ConvRefused` for what it cannot express."""
    x, w = (o.shape for o in node.operands)
    out = node.shape
    a = node.attr
    if node.dtype not in GEMM_DTYPES:
        raise ConvRefused(f"the GEMM kernel does not compute {node.dtype.value}")
    if 0 in out:
        raise ConvRefused("the output is empty")
    sx, sw, so = _strides(x), _strides(w), _strides(out)
    isp, ksp, osp = a["input_spatial_dimensions"], a["kernel_spatial_dimensions"], a["output_spatial_dimensions"]
    ib, if_, kin, ko, ob, of = (a[k] for k in ("input_batch_dimension", "input_feature_dimension",
                                               "kernel_input_feature_dimension", "kernel_output_feature_dimension",
                                               "output_batch_dimension", "output_feature_dimension"))
    fg, bg = a["feature_group_count"], a["batch_group_count"]
    groups = max(fg, bg)
    ci, og = w[kin], w[ko] // groups
    kernel = [w[d] for d in ksp]
    if ci * math.prod(kernel) == 0:
        raise ConvRefused("the window is empty (no input features or a kernel dim of 0)")
    ns = len(isp)
    # K: the input feature and the kernel positions, ordered as the kernel's memory
    kdims = sorted([(-1, sw[kin])] + [(d, sw[ksp[d]]) for d in range(ns)], key=lambda t: -t[1])
    ksizes = [ci if d < 0 else kernel[d] for d, _ in kdims]
    k_kernel = Offsets.strided(ksizes, [s for _, s in kdims])
    k_in = Offsets.strided(ksizes, [sx[if_] if d < 0 else 0 for d, _ in kdims])
    k_pos = tuple(Offsets.strided(ksizes, [a["rhs_dilation"][e] if d == e else 0 for d, _ in kdims])
                  for e in range(ns))
    k_lin = Offsets.strided(ksizes, [sx[if_] if d < 0 else a["rhs_dilation"][d] * sx[isp[d]] for d, _ in kdims])
    # the group: which input features (feature groups) or batch rows (batch groups) it reads
    g_in = ci * sx[if_] if fg > 1 else (x[ib] // bg) * sx[ib]
    pix = sorted([_Dim(out[ob], so[ob], sx[ib], -1)] + [_Dim(out[osp[d]], so[osp[d]], 0, d) for d in range(ns)],
                 key=lambda d: -d.out_stride)
    rows_are_pixels = so[of] == 1
    tail = _merging_tail(pix)
    if not rows_are_pixels:
        real = [d for d in pix[len(pix) - tail:] if d.size > 1]
        if real and real[-1].out_stride != 1:
            raise ConvRefused("no output dim is contiguous with the pixels")
    inner, outer = pix[len(pix) - tail:], pix[:len(pix) - tail]
    if any(d.spatial >= 0 and d.size > 1 for d in outer):
        raise ConvRefused("the output layout splits the spatial dims (one of them merges with neither the "
                          "features nor the other pixels)")
    # a size-1 spatial dim outside the tail still has a window position (its pixel 0) that
    # low padding can put outside the input: the Window masks only its pixel dims' positions
    inner = [d for d in outer if d.spatial >= 0] + inner
    outer = [d for d in outer if d.size > 1]
    window = Window(
        pix_sizes=tuple(d.size for d in inner), pix_spatial=tuple(d.spatial for d in inner),
        pix_strides=tuple(d.in_stride for d in inner),
        stride=tuple(a["window_strides"]), low=tuple(a["padding_low"]), ldil=tuple(a["lhs_dilation"]),
        extent=tuple((x[d] - 1) * ld + 1 for d, ld in zip(isp, a["lhs_dilation"])),
        in_stride=tuple(sx[d] for d in isp), k_off=k_in, k_pos=k_pos, k_lin=k_lin,
        **_feature_run(kdims, ksizes, sx[if_]),
        **_feature_line(kdims, ksizes, [sx[if_] if d < 0 else a["rhs_dilation"][d] * sx[isp[d]] for d, _ in kdims]))
    bsizes = [groups] + [d.size for d in outer]
    patches_b = Offsets.strided(bsizes, [g_in] + [d.in_stride for d in outer])
    kernel_b = Offsets.strided(bsizes, [og * sw[ko]] + [0] * len(outer))
    c_b = Offsets.strided(bsizes, [og * so[of]] + [d.out_stride for d in outer])
    npix = math.prod(d.size for d in inner)
    pix_ld = next((d.out_stride for d in reversed(inner) if d.size > 1), 1)
    kk = k_kernel.size
    o_map = Offsets.strided([og], [sw[ko]])
    dummy = Offsets(npix, 0)
    if rows_are_pixels:  # C[pixel, o]: A = patches, B = kernel
        return Layout(math.prod(bsizes), npix, og, kk, patches_b, dummy, Offsets(kk, 0),
                      kernel_b, k_kernel, o_map, c_b=c_b, ldc=pix_ld if npix > 1 else og, a_win=window)
    # C[o, pixel]: A = kernel, B = patches
    return Layout(math.prod(bsizes), og, npix, kk, kernel_b, o_map, k_kernel, patches_b, Offsets(kk, 0), dummy,
                  c_b=c_b, ldc=so[of] if og > 1 else npix, b_win=window, a_operand=1)


def conv_refusal(node: Node) -> str | None:
    """Why the cpu backend leaves ``node`` (a convolution) to the core's decomposition."""
    try:
        conv_layout(node)
    except ConvRefused as e:
        return f"{e} (the core's im2col decomposition runs instead)"
    return None


@dataclass
class ConvSpec(GemmSpec):
    """A GEMM kernel whose contraction is a convolution (or an ``output`` fusion of one)."""

    @functools.cached_property
    def layout(self) -> Layout:
        return conv_layout(self.dot)


__all__ = ["ConvSpec", "conv_layout", "conv_refusal", "ConvRefused"]
