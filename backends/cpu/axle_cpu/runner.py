"""The step runner: one native call runs a sequence of kernel launches.

Calling a compiled kernel through ctypes costs a few microseconds of Python work (building
its pointer array, converting arguments); a training step of a small model launches a
dozen kernels, and NumPy runs the whole step in well under 0.1 ms. So an executable hands
runs of consecutive single-threaded kernels to ``axle_run_steps``, compiled once per
process:

    void axle_run_steps(const Step* table, i64 n, void** ptrs)
    struct Step { kernel_fn fn; i64 bufs; i64 outer; i64 inner; }   // 32 bytes

which calls ``fn(ptrs + bufs, 0, outer, 0, inner, 0, INT64_MAX)`` for each record. ``ptrs``
is the per-call pointer table: every kernel step owns a contiguous region of it holding its
input then output buffer addresses (``bufs`` is the region's first index), filled by one
NumPy gather from the slot addresses of the call.

Loops and conditionals run inside the same call: a record whose ``fn`` is a small
:data:`CONTROL` code (no kernel lives at such an address) is a control record, and the
runner walks the table with a program counter instead of in order:

    COPY    memmove(ptrs[bufs + 1], ptrs[bufs], outer)          then the next record
    JUMP    pc += outer                                         (relative)
    BRANCH  pc += *(i8*)ptrs[bufs] ? 1 : outer                  (leave a loop whose pred is false)
    SWITCH  k = *ptrs[bufs] (inner bytes: a pred or an s32), out of [0, outer) -> outer - 1;
            pc += 1 + k                                         (onto one of the JUMPs after it)

so a loop's condition is computed by its kernels and tested natively: no Python runs
per iteration (plan.py flattens the loops into these records).

A kernel record whose ``fn`` carries ``SPLIT[mode] << SPLIT_SHIFT`` is split by rows or
columns across the native worker pool compiled into the same module (pool_ir.py):
``axle_pool_run(fn, ptrs + bufs, 0, outer, inner, outer or inner, mode, 0)``, so split
kernels run inside loops and between single-threaded ones without returning to Python.

A cached call whose every step is such a kernel goes through ``axle_call`` instead, which
also fills the pointer table, so Python hands over one frame address and nothing else:

    void axle_call(const Frame* f)
    struct Frame { Step* table; i64 nsteps; void** ptrs; i64 nptrs; i64* src; i64* base; u64* slots; }

``ptrs[i] = slots[src[i]] + slots[base[i]]``: ``src`` names the buffer slot of each
pointer, ``base`` the slot holding the address its offset is relative to (a slot that
holds 0 for absolute addresses: arguments and constants).
"""
from __future__ import annotations

import ctypes
import sys
import threading
from collections.abc import Callable

import numpy as np
from llvmlite import ir

from axle.forksafe import renew_in_child

from .emitter import INT64_MAX, SIG
from .lltypes import I64, PTR, VOID
from .pool_ir import pool_ir
from .target import JitModule, host, object_key

#: one table record: kernel address, first index of its pointer region, loop sizes
STEP = np.dtype([("fn", np.uint64), ("bufs", np.int64), ("outer", np.int64), ("inner", np.int64)])
RUNNER = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p)
CALL = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
#: the fields of a Frame, in order (each 8 bytes)
FRAME_FIELDS = ("table", "nsteps", "ptrs", "nptrs", "src", "base", "slots")
#: the ``fn`` codes of control records (see the module docstring)
CONTROL = {"copy": 1, "jump": 2, "branch": 3, "switch": 4}
#: a kernel record's ``fn`` with ``SPLIT[mode] << SPLIT_SHIFT`` added runs split across the
#: native worker pool (pool_ir.py) by rows or columns (user-space addresses stay below 2^57)
SPLIT_SHIFT = 60
SPLIT = {"rows": 1, "columns": 2}


def _loop_head(b: ir.IRBuilder, n: ir.Value) -> tuple[ir.PhiInstr, ir.Block, ir.Block]:
    """``for (k = 0; k < n; )``: the counter ``k`` (each back edge adds its incoming value
    and branches to the test block), the test block and the block after the loop; leaves
    the builder in the loop's body."""
    fn = b.function
    head, cond, loop, done = b.block, fn.append_basic_block("cond"), fn.append_basic_block("body"), \
        fn.append_basic_block("done")
    b.branch(cond)
    b.position_at_end(cond)
    k = b.phi(I64)
    k.add_incoming(ir.Constant(I64, 0), head)
    b.cbranch(b.icmp_signed("<", k, n), loop, done)
    b.position_at_end(loop)
    return k, cond, done


def _counted_loop(b: ir.IRBuilder, n: ir.Value, body: Callable[[ir.Value], None]) -> None:
    """``for (k = 0; k < n; k++) body(k)`` at the builder's position, which it leaves
    after the loop."""
    k, cond, done = _loop_head(b, n)
    body(k)
    k.add_incoming(b.add(k, ir.Constant(I64, 1)), b.block)
    b.branch(cond)
    b.position_at_end(done)


def _module() -> str:
    mod = ir.Module(name="axle_runtime")
    mod.triple = host().triple
    fn = ir.Function(mod, ir.FunctionType(VOID, [PTR, I64, PTR]), name="axle_run_steps")
    fn.attributes.add("nounwind")
    _run_steps_body(mod, fn)
    _call_function(mod, fn)
    # the worker pool is hand-written IR: its declaration here gives way to its definition
    text = "\n".join(line for line in str(mod).splitlines()
                     if not (line.startswith("declare") and '@"axle_pool_run"' in line))
    return text + pool_ir(host().triple.split("-")[0])


def _run_steps_body(mod: ir.Module, fn: ir.Function) -> None:
    """``axle_run_steps``: the records from pc 0 to ``n``, kernels and control records."""
    table, n, ptrs = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    rec = ir.LiteralStructType([I64, I64, I64, I64])
    pc, test, done = _loop_head(b, n)  # pc moves by each record's own step

    def field(i: int) -> ir.Value:
        return b.load(b.gep(table, [pc, ir.Constant(ir.IntType(32), i)], source_etype=rec), typ=I64)

    code, bufs, outer, inner = field(0), field(1), field(2), field(3)
    one = ir.Constant(I64, 1)

    def pointer(k: ir.Value) -> ir.Value:  # ptrs[bufs + k]
        return b.load(b.gep(ptrs, [b.add(bufs, k)], source_etype=PTR), typ=PTR)

    def next_pc(step: ir.Value) -> None:  # pc += step, back to the test
        pc.add_incoming(b.add(pc, step), b.block)
        b.branch(test)

    kernel = fn.append_basic_block("kernel")
    sw = b.switch(code, kernel)
    blocks = {name: fn.append_basic_block(name) for name in CONTROL}
    for name, block in blocks.items():
        sw.add_case(ir.Constant(I64, CONTROL[name]), block)
    b.position_at_end(kernel)
    zero = ir.Constant(I64, 0)
    split, single = fn.append_basic_block("kernel.split"), fn.append_basic_block("kernel.one")
    mode = b.lshr(code, ir.Constant(I64, SPLIT_SHIFT))
    b.cbranch(b.icmp_unsigned("!=", mode, zero), split, single)
    b.position_at_end(single)
    target = b.inttoptr(code, SIG.as_pointer())  # a typed pointer gives llvmlite the callee's type
    b.call(target, [b.gep(ptrs, [bufs], source_etype=PTR), zero, outer, zero, inner, zero,
                    ir.Constant(I64, INT64_MAX)])
    next_pc(one)
    b.position_at_end(split)  # a kernel split across the native pool (pool_ir.py)
    pool_mode = b.sub(mode, one)  # SPLIT codes are the pool's modes plus one
    kernel_at = b.inttoptr(b.and_(code, ir.Constant(I64, (1 << SPLIT_SHIFT) - 1)), PTR)
    over = b.select(b.icmp_unsigned("==", pool_mode, zero), outer, inner)
    pool_run = ir.Function(mod, ir.FunctionType(VOID, [PTR, I64, I64, I64, I64, I64, I64, I64]), name="axle_pool_run")
    b.call(pool_run, [kernel_at, b.ptrtoint(b.gep(ptrs, [bufs], source_etype=PTR), I64), zero, outer, inner,
                      over, pool_mode, zero])
    next_pc(one)
    b.position_at_end(blocks["copy"])
    memmove = mod.declare_intrinsic("llvm.memmove", [PTR, PTR, I64])
    b.call(memmove, [pointer(one), pointer(zero), outer, ir.Constant(ir.IntType(1), 0)])
    next_pc(one)
    b.position_at_end(blocks["jump"])
    next_pc(outer)
    b.position_at_end(blocks["branch"])
    holds = b.icmp_unsigned("!=", b.load(pointer(zero), typ=ir.IntType(8)), ir.Constant(ir.IntType(8), 0))
    next_pc(b.select(holds, one, outer))
    b.position_at_end(blocks["switch"])
    at = pointer(zero)
    narrow, wide, pick = (fn.append_basic_block(name) for name in ("switch.pred", "switch.s32", "switch.pick"))
    b.cbranch(b.icmp_signed("==", inner, one), narrow, wide)  # never load 4 bytes of a 1-byte pred
    b.position_at_end(narrow)
    k8 = b.zext(b.load(at, typ=ir.IntType(8)), I64)
    b.branch(pick)
    b.position_at_end(wide)
    k32 = b.sext(b.load(at, typ=ir.IntType(32)), I64)
    b.branch(pick)
    b.position_at_end(pick)
    k = b.phi(I64)
    k.add_incoming(k8, narrow)
    k.add_incoming(k32, wide)
    inside = b.and_(b.icmp_signed(">=", k, zero), b.icmp_signed("<", k, outer))
    next_pc(b.add(one, b.select(inside, k, b.sub(outer, one))))
    b.position_at_end(done)
    b.ret_void()


def _call_function(mod: ir.Module, run: ir.Function) -> None:
    """``axle_call(frame)``: fills the frame's pointer table, then runs its steps."""
    fn = ir.Function(mod, ir.FunctionType(VOID, [PTR]), name="axle_call")
    fn.attributes.add("nounwind")
    (frame,) = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))

    def field(name: str, typ: ir.Type) -> ir.Value:
        at = b.gep(frame, [ir.Constant(I64, FRAME_FIELDS.index(name))], source_etype=I64)
        return b.load(at, typ=typ)

    table, nsteps, ptrs, nptrs = field("table", PTR), field("nsteps", I64), field("ptrs", PTR), field("nptrs", I64)
    src, base, slots = field("src", PTR), field("base", PTR), field("slots", PTR)

    def fill(i: ir.Value) -> None:
        def slot(index_array: ir.Value) -> ir.Value:
            k = b.load(b.gep(index_array, [i], source_etype=I64), typ=I64)
            return b.load(b.gep(slots, [k], source_etype=I64), typ=I64)

        b.store(b.add(slot(src), slot(base)), b.gep(ptrs, [i], source_etype=I64))

    _counted_loop(b, nptrs, fill)
    b.call(run, [table, nsteps, ptrs])
    b.ret_void()


_RUNNER: tuple[JitModule, ctypes._CFunctionType, ctypes._CFunctionType] | None = None
_LOCK = threading.Lock()
renew_in_child(sys.modules[__name__], "_LOCK")


def run_steps() -> ctypes._CFunctionType:
    """The process-wide ``axle_run_steps`` (compiled on first use, once: under
    ``functools.lru_cache`` two threads racing through the first call each compiled one,
    and the module of the copy not cached was freed while its caller still held the
    function pointer)."""
    global _RUNNER
    found = _RUNNER
    if found is None:
        with _LOCK:
            if _RUNNER is None:
                # the same module in every process (code and host are in the key): from the
                # disk cache, its IR is never emitted
                jit = JitModule(_module, True, object_key("runtime module", True))
                _RUNNER = (jit, RUNNER(jit.address("axle_run_steps")), CALL(jit.address("axle_call")))
            found = _RUNNER
    return found[1]


def call() -> ctypes._CFunctionType:
    """The process-wide ``axle_call`` (compiled with ``axle_run_steps``)."""
    run_steps()
    assert _RUNNER is not None, "run_steps() compiles the runtime module"
    return _RUNNER[2]


#: the worker pool's entry points (pool_ir.py) and their ctypes signatures
_I64 = ctypes.c_int64
POOL_SIGNATURES: dict[str, type[ctypes._CFunctionType]] = {
    "axle_pool_run": ctypes.CFUNCTYPE(None, ctypes.c_void_p, _I64, _I64, _I64, _I64, _I64, _I64, _I64),
    "axle_pool_start": ctypes.CFUNCTYPE(_I64, _I64),
    "axle_pool_stop": ctypes.CFUNCTYPE(_I64, _I64),
    "axle_pool_forget": ctypes.CFUNCTYPE(None),
    "axle_pool_alive": ctypes.CFUNCTYPE(_I64),
    "axle_pool_workers": ctypes.CFUNCTYPE(_I64),
    "axle_pool_helped": ctypes.CFUNCTYPE(_I64),
    "axle_pool_probe": ctypes.CFUNCTYPE(_I64),
}


def compiled() -> bool:
    """Whether this process has compiled the runtime module yet."""
    return _RUNNER is not None


def pool_function(name: str) -> ctypes._CFunctionType:
    """One of the native worker pool's functions (compiled with ``axle_run_steps``)."""
    run_steps()
    assert _RUNNER is not None, "run_steps() compiles the runtime module"
    return POOL_SIGNATURES[name](_RUNNER[0].address(name))
