"""The differential campaign behind ``make fuzz``: random programs on every backend,
optimized and not, against the interpreter.

``python -m axle.testing.fuzz --programs 10000`` generates ``random_module(seed, n)``
(axle.testing.random_modules) for consecutive seeds, runs each on every config (device,
optimized or not) and compares with the interpreter by the one comparison every
random-program test uses (``cases.assert_program_close``). Compiles and runs happen in a
pool of worker processes: a segfault or a hang costs one worker (restarted) and is counted
as a crash or a hang, never the campaign. Every failure is minimized by :func:`shrink` and
printed as IR text the parser reads back, with its inputs, config and differing values."""
from __future__ import annotations

import argparse
import os
import shlex
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from .. import devices
from ..errors import AxleError
from ..interpreter import eval_node, evaluate
from ..ir.builder import make_node
from ..ir.literal import Literal
from ..ir.module import Computation, Module, Node, post_order
from ..ir.ops import OPS, Op
from ..ir.parser import parse_module
from ..ir.types import TensorType
from ..passes.rewrite import full_like
from ..registry import REGISTRY
from . import workers
from .cases import OpCase, assert_program_close, program_tolerance, reduced_terms, run_case, tolerance
from .random_modules import _ensure_custom_call, random_module

#: Outcome kinds of one program on one config; each of FAILURES is minimized and printed.
OK, MISMATCH, ERROR = "ok", "mismatch", "error"
CRASH, HANG = workers.CRASH, workers.HANG
FAILURES = (MISMATCH, ERROR, CRASH, HANG)
#: Differs from the interpreter only where the reference itself moves when its inexact
#: ops move within tolerance (see _stable_mismatch): counted, not a failure.
UNSTABLE = "unstable"
_LABELS = {MISMATCH: "mismatches", ERROR: "errors", CRASH: "crashes", HANG: "hangs", UNSTABLE: "unstable"}
MAX_NODES = 40
#: the share of programs with loops and conditionals (random_module(..., control=True))
CONTROL_SHARE = 0.25
PROGRESS_EVERY = 60.0  # seconds between progress lines


@dataclass(frozen=True)
class Config:
    device: str
    optimize: bool

    @property
    def name(self) -> str:
        return f"{self.device} {'optimized' if self.optimize else 'unoptimized'}"


@dataclass(frozen=True)
class Program:
    """A random program by its seed, or (while shrinking) an IR text with its inputs."""

    seed: int
    n_nodes: int
    text: str | None = None
    inputs: tuple[np.ndarray, ...] | None = None
    control: bool = False  # random_module(..., control=True): loops and conditionals among the steps

    def build(self) -> tuple[Module, list[np.ndarray]]:
        if self.text is None:
            return random_module(self.seed, self.n_nodes, control=self.control)
        return parse_module(self.text), list(self.inputs or ())

    @property
    def name(self) -> str:
        return f"random_module({self.seed}, {self.n_nodes}{', control=True' if self.control else ''})"


def program_for(seed: int, max_nodes: int = MAX_NODES, control: float = CONTROL_SHARE) -> Program:
    """The campaign's program for a seed: its size (1..max_nodes) also follows the seed,
    and so does whether it is a control program (with probability ``control``: 0 gives the
    stream of campaigns before control programs, 1 only control programs). The other
    seeds keep their programs whatever the share."""
    rng = np.random.default_rng([seed, 12])
    n = 1 + int(rng.integers(max_nodes))
    return Program(seed, n, control=bool(rng.random() < control))


@dataclass(frozen=True)
class Outcome:
    kind: str
    detail: str = ""


# ------------------------------------------------------------------------- in a worker


def check_program(program: Program, config: Config) -> Outcome:
    """Runs one program on one config and compares with the interpreter (in a worker)."""
    module, inputs = program.build()
    expected = evaluate(module, *inputs)
    try:
        actual = run_case(OpCase("fuzz", module, inputs), REGISTRY.device(config.device), optimize=config.optimize)
    except Exception as e:  # noqa: BLE001 - any exception from the backend is a finding
        return Outcome(ERROR, f"{type(e).__name__}: {e}")
    try:
        assert_program_close(module, actual, expected, config.name)
    except AssertionError as e:
        if not _stable_mismatch(module, inputs, actual, expected):
            return Outcome(UNSTABLE, str(e).strip())
        return Outcome(MISMATCH, str(e).strip())
    return Outcome(OK)


def _inexact(n: Node) -> bool:
    """Ops a backend may round differently from NumPy within tolerance: approximations and
    sums in another order (max/min reductions and the rest of the arithmetic are exact)."""
    if not isinstance(n.type, TensorType) or not n.dtype.is_float:
        return False
    return n.traits.transcendental or n.op in (Op.DOT_GENERAL, Op.RSQRT) or (
        n.op is Op.REDUCE and n.attr["kind"] in ("sum", "prod"))


def perturbed(module: Module, inputs: list[np.ndarray], sign: int) -> list[np.ndarray]:
    """The interpreter's results with every inexact intermediate moved up (sign=1) or down
    (-1) by part of its tolerance: what a backend a few ulps off at each op could give.
    Inside loop bodies and branches too, on every trip (a loop may amplify an ulp, or an
    exit test on a sum may flip)."""
    root = _perturbed_run(module.entry, inputs, sign)
    return list(root) if isinstance(root, tuple) else [root]


def _perturbed_run(comp: Computation, args: Sequence[Any], sign: int) -> Any:
    env: dict[int, Any] = {p.uid: np.asarray(x) for p, x in zip(comp.parameters, args)}

    def call(sub: Computation, sub_args: Sequence[Any]) -> Any:
        return _perturbed_run(sub, sub_args, sign)

    for n in comp.nodes:
        if n.op is Op.PARAMETER:
            continue
        operands = [env[o.uid] for o in n.operands]
        if n.traits.control:  # the op's reference runs its computations through ``call``
            v = OPS[n.op].reference(*operands, **dict(n.attrs), call=call)
        else:
            v = eval_node(n, operands)
        if _inexact(n):
            rtol, atol = tolerance(n.dtype, n.op if n.traits.transcendental else None, reduced_terms(n))
            # an eighth of the op's tolerance: programs are compared within 8 times it
            moved = (np.asarray(v, np.float64) * (1 + sign * rtol / 8) + sign * atol / 8).astype(n.dtype.np)
            v = np.where(moved == v, np.nextafter(v, np.asarray(sign * np.inf, n.dtype.np)), moved)  # >= 1 ulp
        env[n.uid] = v
    return env[comp.root.uid]


def _stable_mismatch(module: Module, inputs: list[np.ndarray], actual: list[np.ndarray],
                     expected: list[np.ndarray]) -> bool:
    """Whether some element differs where the reference itself is stable: a program whose
    result moves beyond tolerance when its inexact ops move within theirs (cos of a huge
    exp, a compare of two sums) does not pin the backend's answer down."""
    with np.errstate(all="ignore"):
        refs = [perturbed(module, inputs, s) for s in (1, -1)]
    for i, (a, e) in enumerate(zip(actual, expected)):
        tol = program_tolerance(module, e.dtype)
        if a.shape != e.shape or a.dtype != e.dtype:
            return True
        stable = np.logical_and.reduce([_close(r[i], e, tol) for r in refs])
        if np.any(~_close(a, e, tol) & stable):
            return True
    return False


def _close(a: np.ndarray, e: np.ndarray, tol: tuple[float, float]) -> np.ndarray:
    """assert_close's test, element by element."""
    if e.dtype.kind in "biu":
        return np.asarray(a == e)
    return np.isclose(a.astype(np.float64), e.astype(np.float64), *tol, equal_nan=True)


def _setup_worker() -> None:
    """A campaign worker's setup: quiet numerics, the generator's custom call, every
    backend loaded (so that start-up never counts against a task's timeout)."""
    warnings.simplefilter("ignore")
    np.seterr(all="ignore")

    _ensure_custom_call()  # texts that name the generator's custom call must parse

    devices()


# ---------------------------------------------------------------------------- the pool


#: A task: a module-level function and its arguments, run in a worker; it returns an Outcome.
Task = workers.Task


def _outcome(answer: object) -> Outcome:
    """A worker's answer as an Outcome: a task that raised is an error, a lost worker a
    crash or a hang."""
    if isinstance(answer, workers.Raised):
        return Outcome(ERROR, answer.error)
    if isinstance(answer, workers.Lost):
        return Outcome(answer.kind, answer.detail)
    return answer  # type: ignore[return-value]  # check_program's answer: an Outcome


class Pool(workers.Pool):
    """The campaign's worker pool (axle.testing.workers): answers are Outcomes, and the
    campaign's OpenCL programs, new each time, are cached away from the user's cache."""

    #: runs per worker before it is replaced: a fresh one leaves behind the memory
    #: mappings PoCL never releases (about 8 per OpenCL run: a worker reached the
    #: kernel's limit of 65,530 after about 13,000 runs, see docs/reliability.md)
    TASKS_PER_WORKER = 3000

    def __init__(self, workers_: int, timeout: float) -> None:
        self.cache = tempfile.TemporaryDirectory(prefix="axle-fuzz-")
        flags = os.environ.get("AXLE_FLAGS", "")
        env = {} if "--compile_cache=" in flags else {
            "AXLE_FLAGS": f"{flags} --compile_cache={shlex.quote(self.cache.name)}".strip()}
        super().__init__(workers_, timeout, setup="axle.testing.fuzz:_setup_worker", env=env,
                         max_tasks=self.TASKS_PER_WORKER)

    def imap(self, tasks: Iterable[Task]) -> Iterator[tuple[Task, Outcome]]:  # type: ignore[override]  # Outcomes
        for task, answer in super().imap(tasks):
            yield task, _outcome(answer)

    def run(self, program: Program, config: Config) -> Outcome:  # type: ignore[override]  # the campaign's task
        return next(self.imap([(check_program, (program, config))]))[1]

    def close(self) -> None:
        super().close()
        self.cache.cleanup()


# ---------------------------------------------------------------------------- shrinking


def _value_of(module: Module, inputs: list[np.ndarray], node: Node) -> np.ndarray:
    return evaluate(Module(module.name, module.entry.with_root(node)), *inputs)[0]


def _rebuilt(module: Module, inputs: list[np.ndarray], subst: dict[int, Callable[..., Node]],
             new_values: dict[int, np.ndarray] | None = None) -> tuple[Module, list[np.ndarray]]:
    """``module`` with the nodes named in ``subst`` replaced (operands first), its
    parameters renumbered to those still reachable, and their inputs."""
    values = {p.uid: x for p, x in zip(module.entry.parameters, inputs)} | (new_values or {})
    env: dict[int, Node] = {}
    for n in module.entry.nodes:
        ops = tuple(env[o.uid] for o in n.operands)
        m = n if all(a is b for a, b in zip(ops, n.operands)) else n.replace(operands=ops)
        env[n.uid] = subst[n.uid](m) if n.uid in subst else m
    root = env[module.entry.root.uid]
    params = sorted((n for n in post_order([root]) if n.op is Op.PARAMETER), key=lambda p: p.uid)
    renamed = {p.uid: make_node(Op.PARAMETER, (), {"index": i}, type=p.type, name=p.name) for i, p in enumerate(params)}
    env2: dict[int, Node] = dict(renamed)
    for n in post_order([root]):
        if n.op is not Op.PARAMETER:
            ops = tuple(env2[o.uid] for o in n.operands)
            env2[n.uid] = n.replace(operands=ops)
    comp = Computation(module.entry.name, tuple(renamed[p.uid] for p in params), env2[root.uid])
    return Module(module.name, comp), [values[p.uid] for p in params]


def _candidates(module: Module, inputs: list[np.ndarray]) -> Iterator[tuple[Module, list[np.ndarray]]]:
    """Smaller variants, biggest cuts first: one output alone; a node replaced by a new
    parameter or a constant holding its value (dropping everything only it used) or by an
    operand of its type; a parameter turned into a constant."""
    entry = module.entry
    if entry.root.op is Op.TUPLE:
        for r in dict.fromkeys(entry.root.operands):
            yield _rebuilt(module, inputs, {entry.root.uid: lambda _, r=r: r})
    inner = [n for n in entry.nodes if n.op is not Op.PARAMETER and n is not entry.root
             and isinstance(n.type, TensorType) and n.op is not Op.TUPLE]
    for n in reversed(inner):  # users first: a cut near the root drops the most
        value = _value_of(module, inputs, n)
        p = make_node(Op.PARAMETER, (), {"index": 0}, type=n.type)
        yield _rebuilt(module, inputs, {n.uid: lambda _, p=p: p}, {p.uid: value})
        if n.op not in (Op.CONSTANT, Op.BROADCAST_IN_DIM):  # the value made inside the kernel
            yield _rebuilt(module, inputs, {n.uid: lambda m, v=value: _constant(m, v)})
    for n in reversed(entry.nodes):
        for o in dict.fromkeys(n.operands):
            if o.type == n.type and n is not entry.root:
                i = n.operands.index(o)
                yield _rebuilt(module, inputs, {n.uid: lambda m, i=i: m.operands[i]})
    for p, x in zip(entry.parameters, inputs):
        yield _rebuilt(module, inputs, {p.uid: lambda m, x=x: _constant(m, np.asarray(x))})


def _constant(like: Node, value: np.ndarray) -> Node:
    """``value`` as a constant: a broadcast scalar when every element is the same."""
    flat = value.reshape(-1)
    if value.ndim and flat.size and all(x.tobytes() == flat[0].tobytes() for x in flat):
        return full_like(like, flat[0])
    return make_node(Op.CONSTANT, (), {"value": Literal(value)})


def shrink(module: Module, inputs: list[np.ndarray], still_fails: Callable[[Module, list[np.ndarray]], bool],
           budget: int = 300) -> tuple[Module, list[np.ndarray]]:
    """Greedy delta debugging: takes each smaller variant that still fails, resuming the
    scan where the last one was found (the variants before it failed already), until a
    full scan finds none or ``budget`` variants were tried."""
    tried, start = 0, 0
    while tried < budget:
        size = (len(module.entry.nodes), len(module.entry.parameters))
        found = None
        for i, (cand, cand_inputs) in enumerate(_candidates(module, inputs)):
            if i < start or (len(cand.entry.nodes), len(cand.entry.parameters)) >= size:
                continue
            tried += 1
            if still_fails(cand, cand_inputs):
                found = i
                module, inputs = cand, cand_inputs
                break
            if tried >= budget:
                break
        if found is None and start == 0:
            break
        start = found or 0
    return module, inputs


# ----------------------------------------------------------------------------- campaign


@dataclass
class Finding:
    program: Program
    config: Config
    outcome: Outcome
    text: str = ""
    inputs: list[np.ndarray] = field(default_factory=list)

    def report(self) -> str:
        with np.printoptions(threshold=10**6, floatmode="unique"):
            inputs = "\n".join(f"  %arg{i} = {x!r}" for i, x in enumerate(self.inputs)) or "  (none)"
        p = self.program
        return (f"=== {self.outcome.kind} on {self.config.name}: {p.name} ===\n"
                f"{self.outcome.detail}\n--- minimized repro (compile on {self.config.device}, "
                f"optimize={self.config.optimize}) ---\n{self.text}\ninputs:\n{inputs}\n")


@dataclass
class Summary:
    configs: list[Config]
    run: dict[str, int] = field(default_factory=dict)
    counts: dict[str, dict[str, int]] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)
    seconds: float = 0.0
    interrupted: bool = False  # Ctrl-C: the counts are what ran until then

    def add(self, config: Config, outcome: Outcome) -> None:
        self.run[config.name] = self.run.get(config.name, 0) + 1
        c = self.counts.setdefault(config.name, dict.fromkeys(_LABELS, 0))
        if outcome.kind != OK:
            c[outcome.kind] += 1

    def total(self, kind: str) -> int:
        return sum(c[kind] for c in self.counts.values())

    def table(self) -> str:
        lines = [f"{'config':<26}{'programs':>9}" + "".join(f"{v:>12}" for v in _LABELS.values())]
        for cfg in self.configs:
            c = self.counts.get(cfg.name, dict.fromkeys(_LABELS, 0))
            lines.append(f"{cfg.name:<26}{self.run.get(cfg.name, 0):>9}" + "".join(f"{c[k]:>12}" for k in _LABELS))
        lines.append(f"run time {self.seconds:.1f} s" + (" (interrupted)" if self.interrupted else ""))
        return "\n".join(lines)


def default_configs(backends: Iterable[str] | None = None, modes: Iterable[bool] = (True, False)) -> list[Config]:
    """Device 0 of every installed, working backend but the interpreter (the oracle)."""
    names = sorted(REGISTRY.backends()) if backends is None else list(backends)
    for b in names:
        REGISTRY.device(f"{b}:0")  # an unknown or broken backend: DeviceError with the reason
    return [Config(f"{b}:0", m) for b in names if b != "interpreter" for m in modes]


def _minimize(finding: Finding, pool: Pool, budget: int) -> None:
    module, inputs = finding.program.build()

    def still_fails(m: Module, xs: list[np.ndarray]) -> bool:
        prog = replace(finding.program, text=m.as_text(), inputs=tuple(xs))
        return pool.run(prog, finding.config).kind == finding.outcome.kind

    # a crash costs a worker restart per try, a hang that persists a whole timeout
    budget = min(budget, {CRASH: 40, HANG: 10}.get(finding.outcome.kind, budget))
    if budget:
        module, inputs = shrink(module, inputs, still_fails, budget)
    finding.text, finding.inputs = module.as_text(), inputs
    again = pool.run(replace(finding.program, text=finding.text, inputs=tuple(inputs)), finding.config)
    if again.kind == finding.outcome.kind:  # the repro's own differing values
        finding.outcome = again


def run_campaign(programs: int, seed_start: int = 0, configs: list[Config] | None = None, *,
                 workers: int | None = None, timeout: float = 60.0, time_limit: float | None = None,
                 max_nodes: int = MAX_NODES, shrink_budget: int = 300, control: float = CONTROL_SHARE,
                 log: Callable[[str], None] | None = None) -> Summary:
    """Runs ``programs`` random programs (seeds from ``seed_start``; the share ``control``
    of them with loops and conditionals, see program_for) on every config; stops
    dispatching new programs after ``time_limit`` seconds. Failures are minimized."""
    configs = default_configs() if configs is None else configs
    summary = Summary(configs)
    start = time.monotonic()
    deadline = start + time_limit if time_limit else float("inf")

    def tasks() -> Iterator[Task]:
        for seed in range(seed_start, seed_start + programs):
            if time.monotonic() > deadline:
                return
            prog = program_for(seed, max_nodes, control)
            yield from ((check_program, (prog, c)) for c in configs)

    with Pool(workers or os.cpu_count() or 1, timeout) as pool:
        failed: list[Finding] = []
        next_note = time.monotonic() + PROGRESS_EVERY
        try:
            for (_, (prog, cfg)), outcome in pool.imap(tasks()):
                summary.add(cfg, outcome)
                if log and time.monotonic() > next_note:
                    next_note += PROGRESS_EVERY
                    log(f"... {sum(summary.run.values())} runs up to seed {prog.seed}, {len(failed)} failures, "
                        f"{time.monotonic() - start:.0f} s")
                if outcome.kind in FAILURES:
                    failed.append(Finding(prog, cfg, outcome))
                    if log:
                        log(f"{outcome.kind} on {cfg.name}: {prog.name}")
        except KeyboardInterrupt:  # a long campaign stopped by hand still reports what it ran
            summary.interrupted = True
        for f in failed:
            if not summary.interrupted:
                _minimize(f, pool, shrink_budget)
            summary.findings.append(f)
            if log:
                log(f.report())
    summary.seconds = time.monotonic() - start
    return summary


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m axle.testing.fuzz", description=__doc__.split("\n\n")[0])
    ap.add_argument("--programs", "-n", type=int, default=10_000, help="random programs per config (10000)")
    ap.add_argument("--seed-start", type=int, default=0, help="first seed (0)")
    ap.add_argument("--backends", help="comma-separated backend names (default: every installed one)")
    ap.add_argument("--modes", default="optimized,unoptimized", help="optimized, unoptimized or both (default)")
    ap.add_argument("--time-limit", type=float, help="stop starting programs after this many seconds")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds one program may run before it is a hang")
    ap.add_argument("--workers", type=int, help="worker processes (default: one per core)")
    ap.add_argument("--max-nodes", type=int, default=MAX_NODES, help="largest program size (40)")
    ap.add_argument("--shrink-budget", type=int, default=300, help="variants tried per failure (0: no shrinking)")
    ap.add_argument("--control", type=float, default=CONTROL_SHARE, metavar="SHARE",
                    help=f"share of programs with loops and conditionals ({CONTROL_SHARE}; 1: only those, 0: none)")
    args = ap.parse_args(argv)
    if not 0 <= args.control <= 1:
        ap.error(f"--control takes a share between 0 and 1, not {args.control}")
    words = {"optimized": True, "unoptimized": False}
    if not set(args.modes.split(",")) <= words.keys():
        ap.error(f"--modes takes optimized, unoptimized or both, not {args.modes!r}")
    modes = [words[m] for m in args.modes.split(",")]

    try:
        configs = default_configs(args.backends.split(",") if args.backends else None, modes)
    except AxleError as e:
        print(f"axle fuzz: {e}", file=sys.stderr)
        return 2
    print(f"axle fuzz: {args.programs} programs from seed {args.seed_start} on "
          f"{', '.join(c.name for c in configs)}", flush=True)
    summary = run_campaign(args.programs, args.seed_start, configs, workers=args.workers, timeout=args.timeout,
                           time_limit=args.time_limit, max_nodes=args.max_nodes, shrink_budget=args.shrink_budget,
                           control=args.control, log=lambda s: print(s, flush=True))
    print(summary.table())
    return 1 if summary.findings else 0


if __name__ == "__main__":
    # through the imported module, so that workers unpickle the same classes
    from axle.testing.fuzz import main as _main

    sys.exit(_main())
