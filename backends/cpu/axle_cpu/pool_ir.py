"""The native worker pool's LLVM IR (compiled into the step runner's module, runner.py).

Threads are started once (``pthread_create``) and run ``worker``: each spins briefly on
the futex word ``@gen`` and then sleeps on it (``futex(FUTEX_WAIT_PRIVATE)``). A caller
that takes the pool (``@busy``, a try-lock: a caller that finds it taken runs its chunks
itself, so a kernel never waits on another kernel or on itself) writes the job, publishes
the claim word ``@claim = (gen << 32) | next_chunk``, bumps ``@gen`` and wakes sleepers.
Everyone, the caller included, claims chunks with a compare-and-swap on ``@claim`` (a
worker holding a stale generation fails the swap and goes back to waiting, so it never
runs a chunk of a job it did not see published), runs them, and counts them in ``@done``;
the caller returns when ``@done`` reaches the chunk count (after a short spin it sleeps on
``@done``'s low half, and the worker finishing the last chunk wakes it). Workers count the
chunks they run in ``@helped`` (how a split trial tells whether its threads ran at once,
executable._Launch). A job's fields are read only
after a chunk of it has been claimed, and a job cannot end before its claimed chunks are
done, so they are stable while read.

Chunk k of ``range`` items cut into ``n`` is ``[k*step + min(k, extra), ... + step +
(k < extra))`` with ``step, extra = divmod(range, n)``: the cut of ``threads.chunks``, so
a split reduction's partial results (and their combination) are those of the Python pool
it replaces. ``mode`` says which of the kernel's ranges the chunk narrows: 0 rows
(``o0, o1``), 1 columns (``i0, i1``), 2 the first reduced axis (``c0, c1``, each chunk
with its own pointer array at ``bufs + k * stride``).
"""
from __future__ import annotations

#: the ``futex`` system call's number and the spin-wait hint, per architecture
_ARCH = {"x86_64": (202, "declare void @llvm.x86.sse2.pause()\n", "call void @llvm.x86.sse2.pause()"),
         "aarch64": (98, "declare void @llvm.aarch64.hint(i32)\n", "call void @llvm.aarch64.hint(i32 1)")}
#: the architectures whose futex call the pool knows
ARCHES = frozenset(_ARCH)
#: spins (each one hint instruction: ~50 ns on Zen 5) before a worker sleeps on the futex
SPIN = 400
#: spins before a caller waiting for its job's last chunks sleeps: short, since a caller
#: spinning on its core keeps a worker woken onto that core from running
WAITSPIN = 50
#: chunks per thread when the caller leaves the count to the pool
CHUNKS = 4
#: most workers one pool starts
MAX_WORKERS = 255
#: the names of the pool's exported functions (removed from the runner's declarations)
EXPORTS = ("axle_pool_run", "axle_pool_start", "axle_pool_stop", "axle_pool_forget", "axle_pool_alive",
           "axle_pool_probe", "axle_pool_workers", "axle_pool_helped")

_TEXT = r"""
@workers = internal global i64 0
@alive = internal global i64 0
@busy = internal global i32 0
@gen = internal global i32 0
@sleepers = internal global i32 0
@quit = internal global i32 0
@claim = internal global i64 0
@done = internal global i64 0, align 8
@waiter = internal global i32 0
@helped = internal global i64 0
@job.fn = internal global ptr null
@job.bufs = internal global i64 0
@job.stride = internal global i64 0
@job.outer = internal global i64 0
@job.inner = internal global i64 0
@job.range = internal global i64 0
@job.mode = internal global i64 0
@job.n = internal global i64 0
@tids = internal global [MAXW x i64] zeroinitializer

declare i32 @pthread_create(ptr, ptr, ptr, ptr)
declare i32 @pthread_join(i64, ptr)
declare i64 @syscall(i64, ...)
declare i32 @sched_yield()
DECLHINT
define internal void @relax() alwaysinline {
  HINT
  ret void
}

define internal void @noop(ptr %b, i64 %o0, i64 %o1, i64 %i0, i64 %i1, i64 %c0, i64 %c1) {
  ret void
}

define internal void @chunk(ptr %fn, i64 %bufs, i64 %stride, i64 %outer, i64 %inner, i64 %range, i64 %mode,
                            i64 %n, i64 %k) {
  %step = sdiv i64 %range, %n
  %extra = srem i64 %range, %n
  %below = icmp slt i64 %k, %extra
  %kmin = select i1 %below, i64 %k, i64 %extra
  %ks = mul i64 %k, %step
  %lo = add i64 %ks, %kmin
  %one = zext i1 %below to i64
  %len = add i64 %step, %one
  %hi = add i64 %lo, %len
  %off = mul i64 %k, %stride
  %addr = add i64 %bufs, %off
  %b = inttoptr i64 %addr to ptr
  %rows = icmp eq i64 %mode, 0
  %cols = icmp eq i64 %mode, 1
  %red = icmp eq i64 %mode, 2
  %o0 = select i1 %rows, i64 %lo, i64 0
  %o1 = select i1 %rows, i64 %hi, i64 %outer
  %i0 = select i1 %cols, i64 %lo, i64 0
  %i1 = select i1 %cols, i64 %hi, i64 %inner
  %c0 = select i1 %red, i64 %lo, i64 0
  %c1 = select i1 %red, i64 %hi, i64 9223372036854775807
  call void %fn(ptr %b, i64 %o0, i64 %o1, i64 %i0, i64 %i1, i64 %c0, i64 %c1)
  ret void
}

; claims and runs chunks of job %g until none is left (or the job is another one); a worker
; (%helps = 1) counts each chunk it ran in @helped before counting it done, so a caller that
; saw its job done reads them all (threads.NativePool.helped: a split measured while the
; other cores were busy shows as chunks the caller ran alone)
define internal void @work(i64 %g, i64 %helps) {
entry:
  br label %loop
loop:
  %c = load atomic i64, ptr @claim acquire, align 8
  %cg = lshr i64 %c, 32
  %same = icmp eq i64 %cg, %g
  br i1 %same, label %check, label %out
check:
  %k = and i64 %c, 4294967295
  %n = load atomic i64, ptr @job.n acquire, align 8
  %left = icmp slt i64 %k, %n
  br i1 %left, label %take, label %out
take:
  %c1 = add i64 %c, 1
  %pair = cmpxchg ptr @claim, i64 %c, i64 %c1 acq_rel acquire
  %won = extractvalue { i64, i1 } %pair, 1
  br i1 %won, label %run, label %loop
run:
  %fn = load ptr, ptr @job.fn
  %bufs = load i64, ptr @job.bufs
  %stride = load i64, ptr @job.stride
  %outer = load i64, ptr @job.outer
  %inner = load i64, ptr @job.inner
  %range = load i64, ptr @job.range
  %mode = load i64, ptr @job.mode
  call void @chunk(ptr %fn, i64 %bufs, i64 %stride, i64 %outer, i64 %inner, i64 %range, i64 %mode, i64 %n, i64 %k)
  %h = atomicrmw add ptr @helped, i64 %helps monotonic
  %d = atomicrmw add ptr @done, i64 1 seq_cst
  %d1 = add i64 %d, 1
  %last = icmp eq i64 %d1, %n
  br i1 %last, label %last.chunk, label %loop
last.chunk:  ; the job's last chunk: wake its caller if it sleeps (futex on @done's low half)
  %w = load atomic i32, ptr @waiter seq_cst, align 4
  %sleeps = icmp ne i32 %w, 0
  br i1 %sleeps, label %wake, label %loop
wake:
  %r = call i64 (i64, ...) @syscall(i64 FUTEX, ptr @done, i32 129, i32 1)
  br label %loop
out:
  ret void
}

define internal ptr @worker(ptr %arg) {
entry:
  %a = atomicrmw add ptr @alive, i64 1 seq_cst
  ; a job published before this thread first read @gen: helped with now (never missed)
  %first = load atomic i32, ptr @gen seq_cst, align 4
  %c0 = load atomic i64, ptr @claim acquire, align 8
  %g0 = lshr i64 %c0, 32
  call void @work(i64 %g0, i64 1)
  %q0 = load atomic i32, ptr @quit seq_cst, align 4
  %stop0 = icmp ne i32 %q0, 0
  br i1 %stop0, label %leave, label %start
start:
  br label %spin
spin:
  %seen = phi i32 [ %first, %start ], [ %seen, %slept ], [ %seen, %pause ], [ %now, %worked ]
  %i = phi i32 [ 0, %start ], [ 0, %slept ], [ %i1, %pause ], [ 0, %worked ]
  %now = load atomic i32, ptr @gen acquire, align 4
  %moved = icmp ne i32 %now, %seen
  br i1 %moved, label %got, label %idle
idle:
  %long = icmp sge i32 %i, SPIN
  br i1 %long, label %sleep, label %pause
pause:
  call void @relax()
  %i1 = add i32 %i, 1
  br label %spin
sleep:
  %s = atomicrmw add ptr @sleepers, i32 1 seq_cst
  %r = call i64 (i64, ...) @syscall(i64 FUTEX, ptr @gen, i32 128, i32 %seen, ptr null)
  %s2 = atomicrmw sub ptr @sleepers, i32 1 seq_cst
  br label %slept
slept:
  br label %spin
got:
  %q = load atomic i32, ptr @quit acquire, align 4
  %stop = icmp ne i32 %q, 0
  br i1 %stop, label %leave, label %job
job:
  %c = load atomic i64, ptr @claim acquire, align 8
  %g = lshr i64 %c, 32
  call void @work(i64 %g, i64 1)
  br label %worked
worked:
  br label %spin
leave:
  %a2 = atomicrmw sub ptr @alive, i64 1 seq_cst
  ret ptr null
}

; bumps the generation (with @claim already written) and wakes sleeping workers
define internal void @publish(i64 %claim) {
  %g = lshr i64 %claim, 32
  %g32 = trunc i64 %g to i32
  store atomic i64 %claim, ptr @claim seq_cst, align 8
  store atomic i32 %g32, ptr @gen seq_cst, align 4
  %s = load atomic i32, ptr @sleepers seq_cst, align 4
  %any = icmp sgt i32 %s, 0
  br i1 %any, label %wake, label %done
wake:
  %r = call i64 (i64, ...) @syscall(i64 FUTEX, ptr @gen, i32 129, i32 2147483647)
  br label %done
done:
  ret void
}

define internal i64 @next_claim() {
  %g = load i32, ptr @gen
  %g1 = add i32 %g, 1
  %g64 = zext i32 %g1 to i64
  %c = shl i64 %g64, 32
  ret i64 %c
}

define internal i1 @try_take() {
  %pair = cmpxchg ptr @busy, i32 0, i32 1 acquire monotonic
  %won = extractvalue { i32, i1 } %pair, 1
  ret i1 %won
}

; waits for the job's %n chunks (spinning briefly, then asleep on @done's low half: a
; caller spinning or yielding on its core kept a worker woken onto that core from running),
; then gives the pool back
define internal void @finish(i64 %n) {
entry:
  br label %wait
wait:
  %i = phi i64 [ 0, %entry ], [ %i1, %slept ], [ %i1, %hint ]
  %d = load atomic i64, ptr @done seq_cst, align 8
  %all = icmp sge i64 %d, %n
  br i1 %all, label %out, label %more
more:
  %i1 = add i64 %i, 1
  %long = icmp sgt i64 %i, WAITSPIN
  br i1 %long, label %sleep, label %hint
sleep:
  store atomic i32 1, ptr @waiter seq_cst, align 4
  %d2 = load atomic i64, ptr @done seq_cst, align 8
  %all2 = icmp sge i64 %d2, %n
  br i1 %all2, label %out, label %wait.futex
wait.futex:
  %d32 = trunc i64 %d2 to i32
  %r = call i64 (i64, ...) @syscall(i64 FUTEX, ptr @done, i32 128, i32 %d32, ptr null)
  br label %slept
slept:
  br label %wait
hint:
  call void @relax()
  br label %wait
out:
  store atomic i32 0, ptr @busy release, align 4
  ret void
}

define internal void @set_job(ptr %fn, i64 %bufs, i64 %stride, i64 %outer, i64 %inner, i64 %range, i64 %mode,
                              i64 %n) {
  ; no chunk left in any generation while the fields change: a worker that read the claim
  ; word before this store fails its compare-and-swap, one that reads it after finds no chunk
  store atomic i64 -1, ptr @claim seq_cst, align 8
  store ptr %fn, ptr @job.fn
  store i64 %bufs, ptr @job.bufs
  store i64 %stride, ptr @job.stride
  store i64 %outer, ptr @job.outer
  store i64 %inner, ptr @job.inner
  store i64 %range, ptr @job.range
  store i64 %mode, ptr @job.mode
  store atomic i64 %n, ptr @job.n release, align 8
  store atomic i64 0, ptr @done monotonic, align 8
  store atomic i32 0, ptr @waiter monotonic, align 4
  ret void
}

; runs fn over [0, range) cut into nchunks (0: CHUNKS per thread) along mode's range
define void @axle_pool_run(ptr %fn, i64 %bufs, i64 %stride, i64 %outer, i64 %inner, i64 %range, i64 %mode,
                           i64 %nchunks) {
entry:
  %w = load atomic i64, ptr @workers monotonic, align 8
  %none = icmp eq i64 %w, 0
  %auto = icmp sle i64 %nchunks, 0
  %t = add i64 %w, 1
  %per = mul i64 %t, CHUNKS
  %dflt = select i1 %none, i64 1, i64 %per
  %n0 = select i1 %auto, i64 %dflt, i64 %nchunks
  %big = icmp sgt i64 %n0, %range
  %n1 = select i1 %big, i64 %range, i64 %n0
  %one = icmp sle i64 %n1, 1
  %skip = or i1 %none, %one
  br i1 %skip, label %inline, label %try
try:
  %won = call i1 @try_take()
  br i1 %won, label %pooled, label %inline
pooled:
  call void @set_job(ptr %fn, i64 %bufs, i64 %stride, i64 %outer, i64 %inner, i64 %range, i64 %mode, i64 %n1)
  %c = call i64 @next_claim()
  call void @publish(i64 %c)
  %g = lshr i64 %c, 32
  call void @work(i64 %g, i64 0)
  call void @finish(i64 %n1)
  ret void
inline:
  %empty = icmp sle i64 %n1, 0
  br i1 %empty, label %out, label %loop
loop:
  %k = phi i64 [ 0, %inline ], [ %k1, %loop ]
  call void @chunk(ptr %fn, i64 %bufs, i64 %stride, i64 %outer, i64 %inner, i64 %range, i64 %mode, i64 %n1, i64 %k)
  %k1 = add i64 %k, 1
  %end = icmp sge i64 %k1, %n1
  br i1 %end, label %out, label %loop
out:
  ret void
}

; one job of a no-op chunk per worker, the caller claiming none: the time a wake-up takes
define i64 @axle_pool_probe() {
entry:
  %w = load atomic i64, ptr @workers monotonic, align 8
  %none = icmp eq i64 %w, 0
  br i1 %none, label %no, label %try
try:
  %won = call i1 @try_take()
  br i1 %won, label %go, label %no
go:
  call void @set_job(ptr @noop, i64 0, i64 0, i64 0, i64 0, i64 %w, i64 0, i64 %w)
  %c = call i64 @next_claim()
  call void @publish(i64 %c)
  call void @finish(i64 %w)
  ret i64 1
no:
  ret i64 0
}

; starts n workers (at most MAXW); returns how many started
define i64 @axle_pool_start(i64 %n) {
entry:
  store atomic i32 0, ptr @quit seq_cst, align 4
  %cap = icmp sgt i64 %n, MAXW
  %m = select i1 %cap, i64 MAXW, i64 %n
  br label %test
test:
  %i = phi i64 [ 0, %entry ], [ %i1, %ok ]
  %more = icmp slt i64 %i, %m
  br i1 %more, label %make, label %out
make:
  %at = getelementptr [MAXW x i64], ptr @tids, i64 0, i64 %i
  %rc = call i32 @pthread_create(ptr %at, ptr null, ptr @worker, ptr null)
  %fine = icmp eq i32 %rc, 0
  br i1 %fine, label %ok, label %out
ok:
  %i1 = add i64 %i, 1
  br label %test
out:
  store atomic i64 %i, ptr @workers seq_cst, align 8
  ret i64 %i
}

; stops and joins the workers once no job runs (gives up, returning 0, if the pool
; stays taken for `tries` yields: a thread still inside a kernel at exit)
define i64 @axle_pool_stop(i64 %tries) {
entry:
  br label %take
take:
  %t = phi i64 [ 0, %entry ], [ %t1, %wait ]
  %won = call i1 @try_take()
  br i1 %won, label %stop, label %wait
wait:
  %t1 = add i64 %t, 1
  %y = call i32 @sched_yield()
  %late = icmp sgt i64 %t1, %tries
  br i1 %late, label %fail, label %take
fail:
  ret i64 0
stop:
  %w = load atomic i64, ptr @workers seq_cst, align 8
  store atomic i64 0, ptr @workers seq_cst, align 8
  store atomic i32 1, ptr @quit seq_cst, align 4
  ; a new generation (the workers wake and leave) with no chunk to claim: a worker started
  ; later must not find the last job's fields under a fresh claim and run them again
  %c0 = call i64 @next_claim()
  %c = or i64 %c0, 4294967295
  call void @publish(i64 %c)
  %r = call i64 (i64, ...) @syscall(i64 FUTEX, ptr @gen, i32 129, i32 2147483647)
  br label %jtest
jtest:
  %i = phi i64 [ 0, %stop ], [ %i1, %join ]
  %more = icmp slt i64 %i, %w
  br i1 %more, label %join, label %out
join:
  %at = getelementptr [MAXW x i64], ptr @tids, i64 0, i64 %i
  %tid = load i64, ptr %at
  %rc = call i32 @pthread_join(i64 %tid, ptr null)
  %i1 = add i64 %i, 1
  br label %jtest
out:
  store atomic i32 0, ptr @quit seq_cst, align 4
  store atomic i32 0, ptr @busy release, align 4
  ret i64 1
}

; in a forked child, which has none of the parent's threads: an empty, free pool
define void @axle_pool_forget() {
  store i64 -1, ptr @claim
  store i64 0, ptr @workers
  store i64 0, ptr @alive
  store i32 0, ptr @busy
  store i32 0, ptr @sleepers
  store i32 0, ptr @quit
  ret void
}

define i64 @axle_pool_alive() {
  %a = load atomic i64, ptr @alive seq_cst, align 8
  ret i64 %a
}

; chunks run by workers since the pool's module was loaded (the callers' own are not counted)
define i64 @axle_pool_helped() {
  %h = load atomic i64, ptr @helped monotonic, align 8
  ret i64 %h
}

define i64 @axle_pool_workers() {
  %w = load atomic i64, ptr @workers seq_cst, align 8
  ret i64 %w
}
"""


def pool_ir(arch: str) -> str:
    """The pool's functions and globals for a host of architecture ``arch`` (the first
    part of its triple; one of :data:`ARCHES`, elsewhere the pool starts no thread)."""
    arch = arch if arch in _ARCH else "x86_64"  # assembled only: never started there (threads.py)
    futex, declare, hint = _ARCH[arch]
    text = _TEXT
    # DECLHINT before HINT, WAITSPIN before SPIN: each placeholder before those inside it
    for name, value in (("FUTEX", str(futex)), ("DECLHINT", declare), ("HINT", hint), ("MAXW", str(MAX_WORKERS)),
                        ("WAITSPIN", str(WAITSPIN)), ("SPIN", str(SPIN)), ("CHUNKS", str(CHUNKS))):
        text = text.replace(name, value)
    return text
