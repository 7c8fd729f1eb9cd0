"""Ahead-of-time compilation: a traced function to an object file plus a C header.

The object holds the same kernels the JIT would run, plus one exported entry point
``int NAME_run(const T0* arg0, ..., T* out0, ...)`` that calls them in order over
statically allocated temporaries (loops and conditionals as branches between them). No
Python, NumPy or axle is needed at run time: link the object into any C program
(``cc main.c NAME.o -lm``). Like tfcompile's output, the entry point is not reentrant
(temporaries are static); call it from one thread at a time.
Kernels run single-threaded; dots use the GEMM kernel (gemm.py), never BLAS.

    from axle_cpu.aot import compile_aot
    compile_aot(fn, ["f32[100,784]", "f32[784,10]"], "out/", name="mlp")
"""
from __future__ import annotations

import functools
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from llvmlite import ir

from axle.errors import AxleError, BackendError
from axle.ir.dtypes import DType
from axle.ir.module import Module
from axle.ir.types import TensorType

from .emitter import INT64_MAX
from .executable import llvm_module
from .gemm import vector_bits_for
from .lltypes import C_TYPES, I32, I64, PTR, STORAGE, storage_consts
from .plan import ControlStep, HostStep, KernelStep, Plan, build_plan
from .target import emit_object, host


@dataclass
class AotResult:
    name: str
    object_path: str
    header_path: str
    readme_path: str
    object_bytes: int
    arg_types: list[TensorType]
    result_types: list[TensorType]
    scratch_bytes: int


def _c_ident(name: str) -> str:
    out = "".join(c if c.isalnum() or c == "_" else "_" for c in name)
    if not out or out[0].isdigit():
        out = "m_" + out
    return out


def parse_arg(text: str) -> TensorType:
    """'f32[100,784]' (or 'float32[100,784]') -> TensorType, with a clear error."""
    from axle.ir.parser import parse_type

    try:
        return parse_type(text.strip())
    except Exception as e:  # noqa: BLE001 - re-raised as a user error
        raise AxleError(f"aot: cannot read argument type {text!r}; expected e.g. f32[100,784] ({e})") from None


def trace(fn: Callable[..., Any], arg_types: Sequence[TensorType], name: str) -> Module:
    """The function traced over zero-strided placeholder arrays of the given types."""
    from axle.frontend.jit import trace_function

    placeholders = [np.broadcast_to(np.zeros((), t.dtype.np), t.shape) for t in arg_types]
    module, _ = trace_function(fn, placeholders, {}, (), name)
    return module


def _global(mod: ir.Module, name: str, t: ir.Type, init: ir.Constant | None, const: bool) -> ir.GlobalVariable:
    g = ir.GlobalVariable(mod, t, name=name)
    g.linkage = "internal"
    g.align = 64
    g.global_constant = const
    g.initializer = init if init is not None else ir.Constant(t, None)
    return g


def _const_init(arr: np.ndarray, dt: DType) -> tuple[ir.Type, ir.Constant]:
    st = STORAGE[dt]
    vals = storage_consts(arr, dt)
    at = ir.ArrayType(st, max(len(vals), 1))
    return at, ir.Constant(at, vals or [ir.Constant(st, 0)])


def build_entry(plan: Plan, name: str) -> tuple[ir.Module, int]:
    """The LLVM module: every kernel (internal) plus the exported ``NAME_run``. A loop or
    conditional (control steps, plan.py) becomes branches between the steps' blocks."""
    for step in plan.steps:
        if isinstance(step, HostStep):
            raise BackendError(f"aot: {step.label} runs Python on the host and cannot be compiled ahead of time")
    specs = list(plan.kernels.values())
    mod = llvm_module(specs, name)
    for spec in specs:
        f = mod.globals[spec.name]
        f.linkage = "internal"
    nres = len(plan.results)
    fnty = ir.FunctionType(I32, [PTR] * (plan.n_params + nres))
    run = ir.Function(mod, fnty, name=f"{name}_run")
    b = ir.IRBuilder(run.append_basic_block("entry"))

    slot_ptr: dict[int, ir.Value] = {k: run.args[k] for k in range(plan.n_params)}
    for s, arr in plan.constants.items():
        dt = _dtype_of(arr)
        at, init = _const_init(arr, dt)
        slot_ptr[s] = _global(mod, f"{name}.const{s}", at, init, True)
    # Step outputs that are results go straight to the caller's arrays (first use wins).
    direct: dict[int, int] = {}
    produced = {s for st in plan.steps for s in st.outs}
    for k, s in enumerate(plan.results):
        if s in produced and s not in direct:
            direct[s] = k
    scratch = 0
    for step in plan.steps:
        for s, t in zip(step.outs, step.out_types):
            if s in slot_ptr:  # a loop's carry is written by several steps: one buffer
                continue
            if s in direct:
                slot_ptr[s] = run.args[plan.n_params + direct[s]]
            else:
                slot_ptr[s] = _global(mod, f"{name}.tmp{s}", ir.ArrayType(STORAGE[t.dtype], max(t.size, 1)), None,
                                      False)
                scratch += t.nbytes
    # The kernels' pointer arrays are filled once, in the entry block (a loop reuses them).
    arrays = {}
    for i, step in enumerate(plan.steps):
        if isinstance(step, KernelStep):
            ptrs = [slot_ptr[s] for s in step.ins + step.outs]
            arr = arrays[i] = b.alloca(PTR, size=ir.Constant(I32, len(ptrs)))
            for k, p in enumerate(ptrs):
                b.store(b.bitcast(p, PTR), b.gep(arr, [ir.Constant(I32, k)], source_etype=PTR))
    blocks = [run.append_basic_block(f"step{i}") for i in range(len(plan.steps))] + [run.append_basic_block("exit")]
    b.branch(blocks[0])
    for i, step in enumerate(plan.steps):
        b.position_at_end(blocks[i])
        if isinstance(step, ControlStep):
            _CONTROL_IR[step.kind](b, step, [b.bitcast(slot_ptr[s], PTR) for s in step.ins + step.outs],
                                   functools.partial(_block_from, blocks, i))
            continue
        assert isinstance(step, KernelStep)
        outer, inner = step.spec.loop_sizes
        b.call(mod.globals[step.spec.name], [arrays[i], _c(0), _c(outer), _c(0), _c(inner), _c(0), _c(INT64_MAX)])
        b.branch(blocks[i + 1])
    b.position_at_end(blocks[-1])
    # Results that are inputs, constants or repeated outputs are copied.
    for k, (s, t) in enumerate(zip(plan.results, plan.result_types)):
        if direct.get(s) == k or t.nbytes == 0:
            continue
        _memmove(b, run.args[plan.n_params + k], slot_ptr[s], _c(t.nbytes))
    b.ret(ir.Constant(I32, 0))
    return mod, scratch


def _c(v: int) -> ir.Constant:
    return ir.Constant(I64, v)


def _memmove(b: ir.IRBuilder, dst: ir.Value, src: ir.Value, size: ir.Value) -> None:
    memmove = b.module.declare_intrinsic("llvm.memmove", [PTR, PTR, I64])
    b.call(memmove, [b.bitcast(dst, PTR), b.bitcast(src, PTR), size, ir.Constant(ir.IntType(1), 0)])


# control steps as LLVM branches: ``ptrs`` the step's buffers (ins then outs), ``to(k)`` the
# block of the step ``k`` steps from this one, as the runner's records move by (runner.py)
Blocks = Callable[[int], ir.Block]


def _block_from(blocks: list[ir.Block], i: int, k: int) -> ir.Block:
    return blocks[i + k]


def _copy_ir(b: ir.IRBuilder, step: ControlStep, ptrs: list[ir.Value], to: Blocks) -> None:
    _memmove(b, ptrs[1], ptrs[0], _c(step.arg))
    b.branch(to(1))


def _jump_ir(b: ir.IRBuilder, step: ControlStep, ptrs: list[ir.Value], to: Blocks) -> None:
    b.branch(to(step.arg))


def _branch_ir(b: ir.IRBuilder, step: ControlStep, ptrs: list[ir.Value], to: Blocks) -> None:
    pred = b.load(ptrs[0], typ=ir.IntType(8))
    b.cbranch(b.icmp_unsigned("!=", pred, ir.Constant(ir.IntType(8), 0)), to(1), to(step.arg))


def _switch_ir(b: ir.IRBuilder, step: ControlStep, ptrs: list[ir.Value], to: Blocks) -> None:
    t = ir.IntType(8 * step.width)
    sw = b.switch(b.load(ptrs[0], typ=t), to(step.arg))  # out of range (negative too): the last branch
    for k in range(step.arg - 1):
        sw.add_case(ir.Constant(t, k), to(1 + k))


_CONTROL_IR: dict[str, Callable[[ir.IRBuilder, ControlStep, list[ir.Value], Blocks], None]] = {
    "copy": _copy_ir, "jump": _jump_ir, "branch": _branch_ir, "switch": _switch_ir}


def _dtype_of(arr: np.ndarray) -> DType:
    from axle.ir.dtypes import dtype

    return dtype(arr.dtype)


def header_text(name: str, arg_names: Sequence[str], plan: Plan, scratch: int, source: str) -> str:
    up = name.upper()
    lines = [
        f"/* {name}.h: generated by `axle aot` from {source}. Do not edit. */",
        f"#ifndef {up}_H",
        f"#define {up}_H",
        "#include <stdbool.h>",
        "#include <stdint.h>",
        "#ifdef __cplusplus",
        'extern "C" {',
        "#endif",
        "",
        "/* Buffer sizes in elements and bytes; arrays are dense and row-major (C order). */",
    ]
    params = []
    for k, (an, t) in enumerate(zip(arg_names, plan.param_types)):
        lines.append(f"#define {up}_ARG{k}_SIZE {t.size}  /* {an}: {t} */")
        lines.append(f"#define {up}_ARG{k}_BYTES {t.nbytes}")
        params.append(f"const {C_TYPES[t.dtype]}* {an}")
    for k, t in enumerate(plan.result_types):
        lines.append(f"#define {up}_OUT{k}_SIZE {t.size}  /* out{k}: {t} */")
        lines.append(f"#define {up}_OUT{k}_BYTES {t.nbytes}")
        params.append(f"{C_TYPES[t.dtype]}* out{k}")
    lines += [
        "/* Static temporaries inside the object (not reentrant). */",
        f"#define {up}_SCRATCH_BYTES {scratch}",
        "",
        f"/* Runs {name}: reads the arguments, writes every out array. Returns 0.",
        "   Single-threaded; call from one thread at a time (temporaries are static). */",
        f"int {name}_run({', '.join(params)});",
        "",
        "#ifdef __cplusplus",
        "}",
        "#endif",
        f"#endif /* {up}_H */",
        "",
    ]
    return "\n".join(lines)


def readme_text(name: str, plan: Plan, obj_bytes: int, source: str) -> str:
    sig = ", ".join(str(t) for t in plan.param_types)
    res = ", ".join(str(t) for t in plan.result_types)
    return f"""# {name}: ahead-of-time compiled with axle

Generated by `axle aot` from `{source}` for `{host().triple}` (CPU `{host().cpu}`).

- `{name}.o`: relocatable object ({obj_bytes} bytes), {len(plan.kernels)} kernel(s), no dependencies
  beyond libm.
- `{name}.h`: `int {name}_run(...)` taking ({sig}) and writing ({res}), plus buffer sizes.

Build and link with any C compiler:

    cc -O2 main.c {name}.o -lm -o main

Arrays are dense row-major. `{name}_run` is single-threaded and not reentrant (its
temporaries are static). The object uses the instruction set of the machine it was
compiled on (`--cpu generic` builds a portable one).
"""


def compile_aot(fn: Callable[..., Any] | Module, args: Sequence[TensorType | str], out_dir: str, *,
                name: str | None = None, arg_names: Sequence[str] | None = None, optimize: bool = True,
                cpu: str | None = None, features: str | None = None, source: str = "") -> AotResult:
    """Compiles ``fn`` (or a module) for argument types ``args`` into ``out_dir``:
    ``NAME.o``, ``NAME.h`` and ``README.md``. ``cpu="generic"`` targets any x86-64."""
    types = [parse_arg(a) if isinstance(a, str) else a for a in args]
    if isinstance(fn, Module):
        module = fn
        name = name or module.name
    else:
        name = name or str(getattr(fn, "__name__", "fn"))
    name = _c_ident(name)
    if not isinstance(fn, Module):
        module = trace(fn, types, name)
    if [p.type for p in module.entry.parameters] != list(types):
        raise AxleError(f"aot: {name} takes ({', '.join(str(p.type) for p in module.entry.parameters)}), "
                        f"but the argument types given are ({', '.join(map(str, types))})")
    if optimize:
        from axle.compiler import optimize_for
        from axle.registry import REGISTRY

        module = optimize_for(module, REGISTRY.device("cpu:0"))
    if cpu == "generic" and features is None:
        features = ""
    # GEMM kernels are register-tiled for the target's vector width, not the host's.
    plan = build_plan(module, blas=False, arena=False, vector_bits=vector_bits_for(features))
    mod, scratch = build_entry(plan, name)
    from .executable import interleave_ok

    obj = emit_object(str(mod), cpu=cpu, features=features, interleave=interleave_ok(list(plan.kernels.values())))
    os.makedirs(out_dir, exist_ok=True)
    names = list(arg_names) if arg_names else [
        _c_ident(p.name) if p.name else f"arg{k}" for k, p in enumerate(module.entry.parameters)]
    if len(set(names)) != len(names) or any(n.startswith("out") and n[3:].isdigit() for n in names):
        names = [f"arg{k}" for k in range(len(names))]
    paths = [os.path.join(out_dir, f"{name}.{ext}") for ext in ("o", "h")] + [os.path.join(out_dir, "README.md")]
    with open(paths[0], "wb") as f:
        f.write(obj)
    src = source or getattr(fn, "__qualname__", name)
    with open(paths[1], "w") as f:
        f.write(header_text(name, names, plan, scratch, src))
    with open(paths[2], "w") as f:
        f.write(readme_text(name, plan, len(obj), src))
    return AotResult(name, paths[0], paths[1], paths[2], len(obj), list(plan.param_types),
                     list(plan.result_types), scratch)


__all__ = ["compile_aot", "AotResult", "parse_arg", "trace"]
