"""A ``sort`` (launch kind ``sort``) as a C-family kernel: a stable bottom-up merge sort
of each row's permutation, then the chosen operand gathered through it.

The device loop runs over the rows (every index but ``dimension``), so a device with many
threads sorts many rows at once; each row sorts a permutation of ``0..n-1`` in two index
scratch buffers of the operand's size (ping-pong), comparing the keys lexicographically
with the op table's order: NaN after everything (any NaN equal to any NaN), -0.0 equal
to +0.0, ``descending`` the reverse order. A merge takes the left run's element on a tie,
so the sort is stable in both directions. O(n log n) per row, no recursion, no local
memory: any C dialect (C99, OpenCL C) compiles it."""
from __future__ import annotations

import math

from ..ir.dtypes import DType
from ..ir.module import Computation
from ..ir.types import TensorType
from .c import CKernel, Dialect, used_helpers


def _lt(d: Dialect, dt: DType, x: str, y: str) -> str:
    """x strictly before y in ascending key order (NaN last, zeros equal)."""
    if dt.is_float:
        return f"(({x}) < ({y}) || (isnan({y}) && !isnan({x})))"
    return f"(({x}) < ({y}))"


def _load(d: Dialect, ptr: str, dt: DType, off: str) -> str:
    if dt is DType.FLOAT16:
        return d.load_half.format(ptr=ptr, off=off)
    if dt is DType.BFLOAT16:  # its bits as the float they stand for (exact), so keys compare as floats
        return f"axle_bf16_f32({ptr}[{off}])"
    return f"(({d.reg[dt]}){ptr}[{off}])"


def _store(d: Dialect, ptr: str, dt: DType, off: str, value: str) -> str:
    if dt is DType.FLOAT16:
        return d.store_half.format(ptr=ptr, off=off, value=value)
    return f"{ptr}[{off}] = ({d.storage[dt]})({value});"


#: the size arguments a kernel built with ``sizes_as_args`` takes last, in this order
SIZE_ARGS = ("sort_n", "sort_inner", "sort_rows")


def sort_sizes(comp: Computation) -> tuple[int, int, int]:
    """(row length, stride between a row's elements, rows) of a sort computation."""
    shape, dim = comp.root.tensor_type.shape, comp.root.attr["dimension"]
    n = shape[dim]
    return n, math.prod(shape[dim + 1:]), math.prod(shape) // n if n else 0


def sort_kernel(d: Dialect, name: str, comp: Computation, outputs_first: bool = False,
                sizes_as_args: bool = False) -> CKernel:
    """The kernel of a one-op ``sort`` computation (``lowering.plan.single_op``):
    arguments the operands, the output, then two index scratch buffers (with
    ``outputs_first``: the output and the scratch buffers, then the operands, as a runtime
    that passes its outputs first wants them). ``sizes_as_args``: the sizes are int
    arguments (SIZE_ARGS) instead of literals, so one program serves every shape."""
    node = comp.root
    a = node.attr
    params = [p.tensor_type for p in comp.parameters]
    sizes = sort_sizes(comp)
    t, q = d.index_type, f"{d.buffer_qualifier} " if d.buffer_qualifier else ""
    n, inner, rows = (f"(({t}){v})" for v in SIZE_ARGS) if sizes_as_args else sizes
    ins = [f"{q}const {d.storage[p.dtype]}* {d.restrict} p{i}" for i, p in enumerate(params)]
    outs = [f"{q}{d.storage[node.dtype]}* {d.restrict} o0", f"{q}{t}* {d.restrict} s0", f"{q}{t}* {d.restrict} s1"]
    args = (outs + ins if outputs_first else ins + outs) + ([f"int {v}" for v in SIZE_ARGS] if sizes_as_args else [])
    keys = params[:a["num_keys"]]
    helper_args = ", ".join([f"{q}const {d.storage[p.dtype]}* {d.restrict} p{i}" for i, p in enumerate(keys)]
                            + [f"{t} base", f"{t} inner", f"{t} x", f"{t} y"])
    # before(x, y): element x of the row strictly before element y (lexicographic keys)
    tests = []
    for k in range(a["num_keys"]):
        dt = params[k].dtype
        xv, yv = (_load(d, f"p{k}", dt, f"base + {v} * inner") for v in ("x", "y"))
        first, second = (yv, xv) if a["descending"] else (xv, yv)
        tests.append(f"  {{ {d.reg[dt]} a = {first}, b = {second};\n"
                     f"    if ({_lt(d, dt, 'a', 'b')}) return 1;\n"
                     f"    if ({_lt(d, dt, 'b', 'a')}) return 0; }}")
    helper = (f"{d.helper_prefix} int {name}_before({helper_args}) {{\n" + "\n".join(tests) + "\n  return 0;\n}\n")
    key_args = ", ".join(f"p{k}" for k in range(a["num_keys"]))
    out_dt = node.dtype
    src_dt, src_off = params[a["index"]].dtype, f"base + perm[j] * {inner}"
    # bfloat16 results are copied as their bits (a NaN keeps its payload)
    src = f"p{a['index']}[{src_off}]" if src_dt is DType.BFLOAT16 else _load(d, f"p{a['index']}", src_dt, src_off)
    prefix = f"{d.kernel_prefix} " if d.kernel_prefix else ""
    loop = d.device_loop.format(t=t, v="r", n=rows)
    body = f"""{prefix}void {name}({', '.join(args)}) {{
  {loop} {{
    {t} base = (r / {inner}) * {n} * {inner} + r % {inner};
    {q}{t}* perm = s0 + r * {n};
    {q}{t}* tmp = s1 + r * {n};
    for ({t} j = 0; j < {n}; j++) perm[j] = j;
    for ({t} w = 1; w < {n}; w *= 2) {{
      for ({t} lo = 0; lo < {n}; lo += 2 * w) {{
        {t} mid = lo + w < {n} ? lo + w : {n};
        {t} hi = lo + 2 * w < {n} ? lo + 2 * w : {n};
        {t} i = lo, k = mid, o = lo;
        while (i < mid && k < hi) {{
          if ({name}_before({key_args}, base, {inner}, perm[k], perm[i])) tmp[o++] = perm[k++];
          else tmp[o++] = perm[i++];
        }}
        while (i < mid) tmp[o++] = perm[i++];
        while (k < hi) tmp[o++] = perm[k++];
      }}
      {q}{t}* swap = perm; perm = tmp; tmp = swap;
    }}
    for ({t} j = 0; j < {n}; j++) {_store(d, "o0", out_dt, f"base + j * {inner}", src)}
  }}
}}
"""
    scratch = [TensorType(DType.INT64, node.tensor_type.shape)] * 2
    stages = [name] if sizes[2] else []
    return CKernel(name, helper + body, params, [], [node.tensor_type], scratch, stages,
                   set(used_helpers(d, helper + body)))
