"""Code generation: one kernel per fusion (or per op the optimizer left unfused).

A renderer is a table from op to a small string template (tinygrad's renderers work the
same way). This one writes Python/NumPy source text; yours writes C, OpenCL, an assembly
dialect or your compiler's IR. Everything else (which ops are fused together, in what
order kernels run) was already decided by the core optimizer.
"""
from __future__ import annotations

import functools
from typing import Any

import numpy as np

from axle.config import config
from axle.lru import LRU
from axle.ir.builder import make_node
from axle.ir.module import Computation, Node
from axle.ir.ops import OPS, Op
from axle.ir.reductions import maximum, minimum

# HARDWARE: render a fusion. Each entry turns operand names into one expression of the
# device language; an op without an entry is rendered as a call to the core's reference
# implementation, which a real backend replaces with its own device code.
UNARY: dict[Op, str] = {
    Op.NEG: "np.negative", Op.ABS: "np.abs", Op.EXP: "np.exp", Op.LOG: "np.log", Op.SQRT: "np.sqrt",
    Op.TANH: "np.tanh", Op.SIN: "np.sin", Op.COS: "np.cos", Op.FLOOR: "np.floor", Op.CEIL: "np.ceil",
    Op.NOT: "np.invert",
}
BINARY: dict[Op, str] = {
    Op.ADD: "np.add", Op.SUB: "np.subtract", Op.MUL: "np.multiply", Op.MAX: "ieee_maximum",
    Op.MIN: "ieee_minimum", Op.AND: "np.bitwise_and", Op.OR: "np.bitwise_or",
}
#: helpers the rendered source calls by name: NumPy's maximum/minimum pick an arbitrary
#: zero on a (-0.0, +0.0) tie; the IR's max/min follow IEEE 754-2019 (-0.0 < +0.0)
HELPERS: dict[str, Any] = {"ieee_maximum": maximum, "ieee_minimum": minimum}
COMPARE: dict[str, str] = {"eq": "np.equal", "ne": "np.not_equal", "lt": "np.less", "le": "np.less_equal",
                           "gt": "np.greater", "ge": "np.greater_equal"}
RENDER: dict[Op, Any] = {
    **{op: (lambda f: lambda n, a: f"{f}({a[0]})")(f) for op, f in UNARY.items()},
    **{op: (lambda f: lambda n, a: f"{f}({a[0]}, {a[1]})")(f) for op, f in BINARY.items()},
    Op.COMPARE: lambda n, a: f"{COMPARE[n.attr['direction']]}({a[0]}, {a[1]})",
    Op.SELECT: lambda n, a: f"np.where({a[0]}, {a[1]}, {a[2]})",
    Op.RESHAPE: lambda n, a: f"np.reshape({a[0]}, {n.attr['shape']})",
    Op.TUPLE: lambda n, a: "(" + "".join(f"{x}, " for x in a) + ")",
    Op.GET_TUPLE_ELEMENT: lambda n, a: f"{a[0]}[{n.attr['index']}]",
}


def single_op(node: Node) -> Computation:
    """An unfused entry node as a one-op computation, so it renders like a fusion."""
    params = tuple(make_node(Op.PARAMETER, (), {"index": i}, type=o.type) for i, o in enumerate(node.operands))
    return Computation(node.op.value, params, node.replace(operands=params))


def render_kernel(name: str, comp: Computation) -> tuple[str, dict[str, Any]]:
    """The kernel's source text and the names it needs bound (constants, helpers)."""
    env: dict[str, Any] = {"np": np, **HELPERS}
    names = {p.uid: f"p{i}" for i, p in enumerate(comp.parameters)}
    lines = [f"def {name}({', '.join(names[p.uid] for p in comp.parameters)}):"]
    for n in comp.nodes:
        if n.op is Op.PARAMETER:
            continue
        v = names[n.uid] = f"v{len(names)}"
        args = [names[o.uid] for o in n.operands]
        if n.op is Op.CONSTANT:
            env[f"const_{v}"] = n.attr["value"].array
            expr = f"const_{v}"
        elif n.op in RENDER:
            expr = RENDER[n.op](n, args)
        else:
            ref = f"{n.op.name.lower()}_{v}"  # e.g. reduce_v5: the reference, attributes bound
            env[ref] = functools.partial(OPS[n.op].reference, **n.attr)
            expr = f"{ref}({', '.join(args)})"
        lines.append(f"    {v} = {expr}  # {n.op.value} -> {n.type}")
    lines.append(f"    return {names[comp.root.uid]}")
    return "\n".join(lines) + "\n", env


#: compiled kernels by source, bounded like every compile cache (--jit_cache_size): a
#: program fed ever new shapes must not keep every binary it ever built
_BINARIES: LRU[Any] = LRU(lambda: 2 * config.jit_cache_size)


def compile_kernel(name: str, source: str, env: dict[str, Any]) -> Any:
    """Turns kernel source into something launchable."""
    # HARDWARE: compile. Call your device compiler here (clBuildProgram, nvrtc, an LLVM
    # target machine, a vendor toolchain...) and load the binary. Caching binaries by source
    # text keeps recompiles of the same kernel cheap.
    code = _BINARIES.get(source)
    if code is None:
        code = _BINARIES.put(source, compile(source, f"<axle-template kernel {name}>", "exec"))
    scope = dict(env)
    exec(code, scope)  # noqa: S102 - the "binary" of this host-memory device is Python code
    return scope[name]
