"""Mutated IR texts for fuzzing the parser, the verifier and what runs after them.

The contract checked here (docs/reliability.md, "Parser and verifier"): for any text,
``parse_module`` (which verifies) and, when it succeeds, compiling and running the module
on the interpreter either work or raise an :class:`axle.errors.AxleError`; never another
exception. ``tests/core/test_parser_fuzz.py`` drives the mutations with hypothesis;
``tools/parser_fuzz.py`` runs a fixed, numbered campaign (10,000 mutants by default).

A mutation is a function ``(text, rnd) -> text``; ``rnd`` is a ``random.Random`` (under
hypothesis, one whose choices hypothesis makes and shrinks)."""
from __future__ import annotations

import importlib.util
import math
import random
import re
import signal
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

import axle
import axle.numpy as anp

from ..compiler import compile_module, optimize_for
from ..errors import AxleError
from ..ir.builder import Builder, make_node
from ..ir.dtypes import DType
from ..ir.module import Module
from ..ir.ops import BY_NAME, OPS, Op
from ..ir.parser import parse_module
from ..ir.printer import BYTES_MIN
from ..ir.types import TensorType
from ..placement import device
from ..registry import REGISTRY
from .random_modules import CUSTOM_TARGET, _ensure_custom_call, random_module

Mutation = Callable[[str, random.Random], str]

# Tokens roughly as the parser sees them, so that token edits keep the rest intact.
_TOKEN = re.compile(r"%[\w.\-]+|@[\w.\-]+|[-+]?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|\w[\w\-]*|->|\S")
_NUMBER = re.compile(r"(?<![\w.%@])[-+]?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?")
_DTYPE = re.compile(r"\b(?:pred|s32|s64|f16|f32|f64)\b")
_SHAPE = re.compile(r"\[[^\[\]]*\]")
_ATTR = re.compile(r"(?<=, )([a-z_]+)(?==)")
_OPNAME = re.compile(r"(?<= )([a-z][a-z\-]*)(?=\()")
_REF = re.compile(r"%[\w.\-]+")
_CONST = re.compile(r"constant\(([^()]*)\)")

_HOSTILE_NUMBERS = ("-1", "0", "1", "2", "3", "-7", "64", "65", "2.5", "-0.5", "1e400", "-1e400", "1e38",
                    "nan", "inf", "-inf", "9223372036854775807", "9223372036854775808",
                    "-9223372036854775809", "99999999999999999999999999", "4294967296", "100000",
                    "0x10", "1_000", "--1", "1e", ".", "+", "1.2.3")
_HOSTILE_DTYPES = tuple(d.value for d in DType) + ("u32", "s8", "bf16", "f8", "c64", "tuple", "")
_HOSTILE_WORDS = ("ROOT", "entry", "module", "parameter", "constant", "fusion", "true", "false", "sum",
                  "%", "@", "=", "->", "{", "}", "(", ")", "[", "]", ",", ":", '"', '"x"', "//", "é",
                  "\x00", "\\", "'", "#")
_OP_NAMES = tuple(BY_NAME) + ("frobnicate", "Add", "add-", "")
_ATTR_NAMES = tuple(sorted({a.name for d in OPS.values() for a in d.attrs})) + ("bogus", "Axes", "")
_ENUM_WORDS = ("sum", "prod", "max", "min", "and", "or", "avg", "eq", "ne", "lt", "le", "gt", "ge", "xx",
               "loop", "input", "row", "output", "SUM", "true")


def _spans(pattern: re.Pattern[str], text: str) -> list[tuple[int, int]]:
    return [m.span() for m in pattern.finditer(text)]


def _replace_span(text: str, rnd: random.Random, pattern: re.Pattern[str], choices: Sequence[str]) -> str:
    spans = _spans(pattern, text)
    if not spans:
        return text
    a, b = rnd.choice(spans)
    return text[:a] + rnd.choice(choices) + text[b:]


def _tokens(text: str) -> list[tuple[int, int]]:
    return _spans(_TOKEN, text)


def delete_token(text: str, rnd: random.Random) -> str:
    toks = _tokens(text)
    if not toks:
        return text
    a, b = rnd.choice(toks)
    return text[:a] + text[b:]


def duplicate_token(text: str, rnd: random.Random) -> str:
    toks = _tokens(text)
    if not toks:
        return text
    a, b = rnd.choice(toks)
    return text[:b] + " " + text[a:b] + text[b:]


def swap_tokens(text: str, rnd: random.Random) -> str:
    toks = _tokens(text)
    if len(toks) < 2:
        return text
    i = rnd.randrange(len(toks) - 1)
    j = i + 1 if rnd.random() < 0.7 else rnd.randrange(len(toks))
    (a, b), (c, d) = sorted([toks[i], toks[j]])
    if (a, b) == (c, d):
        return text
    return text[:a] + text[c:d] + text[b:c] + text[a:b] + text[d:]


def insert_word(text: str, rnd: random.Random) -> str:
    toks = _tokens(text)
    pos = rnd.choice(toks)[rnd.randrange(2)] if toks else 0
    return text[:pos] + " " + rnd.choice(_HOSTILE_WORDS) + " " + text[pos:]


def delete_char(text: str, rnd: random.Random) -> str:
    if not text:
        return text
    i = rnd.randrange(len(text))
    return text[:i] + text[i + 1:]


def replace_char(text: str, rnd: random.Random) -> str:
    if not text:
        return text
    i = rnd.randrange(len(text))
    return text[:i] + rnd.choice("{}[](),=:%@-.0123456789eE\"\n x") + text[i + 1:]


def replace_number(text: str, rnd: random.Random) -> str:
    return _replace_span(text, rnd, _NUMBER, _HOSTILE_NUMBERS)


def change_dtype(text: str, rnd: random.Random) -> str:
    return _replace_span(text, rnd, _DTYPE, _HOSTILE_DTYPES)


def change_shape(text: str, rnd: random.Random) -> str:
    dims = ["0", "1", "2", "3", "4", "-1", "100000000000", "9223372036854775807", "2.0", "x", ""]
    shapes = ["[]", "[" + ",".join(rnd.choice(dims) for _ in range(rnd.randrange(1, 4))) + "]",
              "[" + ",".join(["1"] * rnd.choice((33, 65, 100))) + "]", "[3,", "[[3]]"]
    return _replace_span(text, rnd, _SHAPE, shapes)


def change_op(text: str, rnd: random.Random) -> str:
    return _replace_span(text, rnd, _OPNAME, _OP_NAMES)


def _op_families() -> dict[str, tuple[str, ...]]:
    """Op names grouped by arity and operand dtypes: swapping within a group often
    keeps a module well typed, which takes the mutant past the parser to what follows."""
    groups: dict[tuple, list[str]] = {}
    for op, d in OPS.items():
        if d.attrs or d.arity is None:
            continue
        groups.setdefault((d.arity, d.operand_dtypes, d.dtype_rule), []).append(op.value)
    return {name: tuple(g) for g in groups.values() for name in g}


_FAMILIES = _op_families()
_ENUM_VALUE = re.compile(r"(?:(?<=kind=)|(?<=direction=))[a-z]+")


def swap_op_in_family(text: str, rnd: random.Random) -> str:
    spans = [(a, b) for a, b in _spans(_OPNAME, text) if text[a:b] in _FAMILIES]
    if not spans:
        return text
    a, b = rnd.choice(spans)
    return text[:a] + rnd.choice(_FAMILIES[text[a:b]]) + text[b:]


def change_enum(text: str, rnd: random.Random) -> str:
    return _replace_span(text, rnd, _ENUM_VALUE, _ENUM_WORDS)


def change_attribute_name(text: str, rnd: random.Random) -> str:
    return _replace_span(text, rnd, _ATTR, _ATTR_NAMES)


def change_attribute_value(text: str, rnd: random.Random) -> str:
    spans = [m.span(1) for m in re.finditer(r"(?<=, )[a-z_]+=([^,\n]*)", text)]
    if not spans:
        return text
    a, b = rnd.choice(spans)
    values = _ENUM_WORDS + ("{}", "{0}", "{1,0}", "{0,0}", "{-1}", "{5}", "[]", "[2]", "[-1]", "0", "-1", "7",
                            "f32", "s64", "pred", '"x"', '"axle.random.scale2"', '"nope"', "%main", "%x", "{",
                            "{0,1,2,3}", "[1,1,1]", "{9223372036854775807}")
    return text[:a] + rnd.choice(values) + text[b:]


def change_reference(text: str, rnd: random.Random) -> str:
    refs = [m.group() for m in _REF.finditer(text)]
    return _replace_span(text, rnd, _REF, refs + ["%undefined", "%", "@main"]) if refs else text


def truncate(text: str, rnd: random.Random) -> str:
    return text[:rnd.randrange(len(text) + 1)]


def _lines(text: str) -> list[str]:
    return text.split("\n")


def delete_line(text: str, rnd: random.Random) -> str:
    lines = _lines(text)
    del lines[rnd.randrange(len(lines))]
    return "\n".join(lines)


def duplicate_line(text: str, rnd: random.Random) -> str:
    lines = _lines(text)
    i = rnd.randrange(len(lines))
    lines.insert(rnd.randrange(len(lines) + 1), lines[i])
    return "\n".join(lines)


def swap_lines(text: str, rnd: random.Random) -> str:
    lines = _lines(text)
    i, j = rnd.randrange(len(lines)), rnd.randrange(len(lines))
    lines[i], lines[j] = lines[j], lines[i]
    return "\n".join(lines)


def nest_deeply(text: str, rnd: random.Random) -> str:
    """Wraps a constant's literal or a type in many brackets (5,000 deep at most)."""
    depth = rnd.choice((1, 2, 3, 40, 1000, 5000))
    if rnd.random() < 0.6:
        spans = [m.span(1) for m in _CONST.finditer(text)]
        if not spans:
            return text
        a, b = rnd.choice(spans)
        return text[:a] + "{" * depth + text[a:b] + "}" * depth + text[b:]
    spans = _spans(re.compile(r"(?<== )[a-z0-9]+\[[^\]]*\]"), text)
    if not spans:
        return text
    a, b = rnd.choice(spans)
    return text[:a] + "(" * depth + text[a:b] + ")" * depth + text[b:]


MUTATIONS: tuple[Mutation, ...] = (
    delete_token, duplicate_token, swap_tokens, insert_word, delete_char, replace_char, replace_number,
    change_dtype, change_shape, change_op, swap_op_in_family, change_enum, change_attribute_name,
    change_attribute_value, change_reference,
    truncate, delete_line, duplicate_line, swap_lines, nest_deeply,
)


def mutate(text: str, rnd: random.Random, count: int) -> str:
    for _ in range(count):
        text = rnd.choice(MUTATIONS)(text, rnd)
    return text


# ------------------------------------------------------------------------ the contract

#: modules whose values hold more bytes than this are compiled but not run
RUN_LIMIT_BYTES = 1 << 22


def _input(t: TensorType, rng: np.random.Generator) -> np.ndarray:
    if t.dtype.is_bool:
        return rng.random(t.shape) < 0.5
    if t.dtype.is_float:
        return (rng.standard_normal(t.shape) * 3).astype(t.dtype.np)
    return rng.integers(-5, 6, size=t.shape).astype(t.dtype.np)


def _largest_value_bytes(module: Module) -> int:
    return max((n.type.nbytes for c in module.computations() for n in c.nodes), default=0)


def check_text(text: str, *, optimize: bool = True) -> str:
    """Parses ``text`` and, when it parses and verifies, compiles it on the interpreter and
    runs it on random inputs. Returns the outcome ('ran', 'compiled' or the AxleError's
    class name); any other exception propagates: it breaks the contract."""
    try:
        module = parse_module(text)
        dev = device("interpreter:0")
        exe = compile_module(module, dev, optimize=optimize)
        if _largest_value_bytes(module) > RUN_LIMIT_BYTES or not math.isfinite(_largest_value_bytes(module)):
            return "compiled"
        rng = np.random.default_rng(0)

        backend = REGISTRY.backend_for(dev)
        args = [backend.to_device(_input(p.tensor_type, rng), dev) for p in module.entry.parameters]
        exe.execute(args)
        return "ran"
    except AxleError as e:
        return type(e).__name__


def corpus(models_path: str, seeds: Sequence[int] = (225, 202, 218, 47, 17, 206, 33, 0), nodes: int = 20) -> list[str]:
    """Real module texts: random modules (every primitive, custom calls), their optimized
    forms (fusions, several computations) and the examples' traced functions."""
    dev = device("interpreter:0")
    texts = []
    for i, seed in enumerate(seeds):
        module, _ = random_module(seed, nodes)
        texts.append(module.as_text())
        if i % 2 == 0:
            texts.append(optimize_for(module, dev).as_text())
    texts.append(_multi_output_fusion_text())
    texts.append(_custom_call_text())
    texts.append(_bytes_constant_text())
    texts.extend(example_texts(models_path))
    return texts


def _bytes_constant_text() -> str:
    """Constants large enough to print as base64 bytes (``constant(bytes "...")``), beside a
    small one: mutants of the payload, its length and its type reach the bytes reader."""
    b = Builder("weights")
    x = b.parameter(f"f32[{BYTES_MIN + 1}]")
    w = b.constant(np.linspace(-1, 1, BYTES_MIN + 1, dtype=np.float32))
    mask = b.constant(np.arange(BYTES_MIN + 1) % 3 == 0)
    half = b.constant(np.full(BYTES_MIN + 1, 0.5, np.float32))
    return b.build(b.select(mask, b.mul(x, w), half)).as_text()


def _custom_call_text() -> str:
    """A custom call, whether or not the random seeds above happen to make one (each new
    primitive in the generator changes what a seed makes)."""
    _ensure_custom_call()
    b = Builder("custom")
    x = b.parameter("f32[3]")
    return b.build(b.add(b.custom_call(x, target=CUSTOM_TARGET, shape=(3,), dtype=DType.FLOAT32), x)).as_text()


def _multi_output_fusion_text() -> str:
    """A fusion with two results read by get-tuple-element (rarer in optimized randoms)."""
    inner = Builder("fused_pair")
    x = inner.parameter("f32[2,3]")
    y = inner.parameter("f32[2,3]")
    comp = inner.computation(inner.add(x, y), inner.reduce(inner.mul(x, y), kind="max", axes=(1,)))
    outer = Builder("pair")
    a, b = outer.parameter("f32[2,3]"), outer.parameter("f32[2,3]")
    fused = make_node(Op.FUSION, (a, b), {"kind": "row", "computation": comp})
    return outer.build(outer.get_tuple_element(fused, index=1), outer.get_tuple_element(fused, index=0)).as_text()


def example_texts(models_path: str) -> list[str]:
    """The example models (``examples/aot/models.py``: seed and mlp) traced, plus the
    gradient of a small tanh layer, as text."""
    spec = importlib.util.spec_from_file_location("_axle_example_models", models_path)
    assert spec is not None and spec.loader is not None, models_path
    models = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(models)
    f32 = np.float32
    seed_args = [np.ones(8, f32)] * 3
    mlp_args = [np.ones((4, 6), f32), np.ones((6, 5), f32), np.ones(5, f32), np.ones((5, 3), f32), np.ones(3, f32)]
    texts = []
    for fn, args in ((models.seed, seed_args), (models.mlp, mlp_args)):
        texts.append(axle.jit(fn, device="interpreter:0").lower(*args).module.as_text())
    grad = axle.jit(axle.grad(lambda w, x: anp.sum(anp.tanh(anp.matmul(x, w)))), device="interpreter:0")
    texts.append(grad.lower(np.ones((3, 2), f32), np.ones((4, 3), f32)).module.as_text())
    return texts


@dataclass
class CampaignReport:
    """What a numbered campaign found: outcome counts and every contract break."""

    mutants: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    #: (mutant number, exception class name, message, the mutated text)
    breaks: list[tuple[int, str, str, str]] = field(default_factory=list)
    seconds: float = 0.0

    def summary(self) -> str:
        kinds = ", ".join(f"{k} {v}" for k, v in self.outcomes.most_common())
        return (f"{self.mutants} mutants in {self.seconds:.1f} s: {len(self.breaks)} non-axle exceptions "
                f"({kinds})")


class _Hang(Exception):
    pass


def campaign(texts: Sequence[str], n: int, *, seed: int = 0, max_mutations: int = 3, optimize: bool = True,
             timeout_s: int = 20) -> CampaignReport:
    """Mutant ``i`` is ``mutate(choice(texts), Random(seed + i), 1..max_mutations)``, so any
    one can be rebuilt from its number. A check that runs past ``timeout_s`` (where the
    platform has SIGALRM) counts as a break named 'hang'."""
    def on_alarm(signum: int, frame: object) -> None:
        raise _Hang()

    alarm = hasattr(signal, "SIGALRM")
    previous = signal.signal(signal.SIGALRM, on_alarm) if alarm else None
    report = CampaignReport()
    start = time.perf_counter()
    try:
        for i in range(n):
            rnd = random.Random(seed + i)
            text = mutate(rnd.choice(list(texts)), rnd, rnd.randint(1, max_mutations))
            if alarm:
                signal.alarm(timeout_s)
            try:
                report.outcomes[check_text(text, optimize=optimize)] += 1
            except _Hang:
                report.breaks.append((seed + i, "hang", f"no answer after {timeout_s} s", text))
            except Exception as e:  # noqa: BLE001 - a break of the contract, recorded
                report.breaks.append((seed + i, type(e).__name__, str(e), text))
            finally:
                if alarm:
                    signal.alarm(0)
            report.mutants += 1
    finally:
        if alarm:
            signal.signal(signal.SIGALRM, previous)
    report.seconds = time.perf_counter() - start
    return report


__all__ = ["MUTATIONS", "Mutation", "mutate", "check_text", "corpus", "example_texts", "RUN_LIMIT_BYTES", "campaign",
           "CampaignReport"]
