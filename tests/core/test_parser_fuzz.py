"""The parser's error contract (issue 12, finding 11): any text gives a module that
verifies and runs on the interpreter, or an axle error with the line and column; never
ValueError, AssertionError, KeyError, RecursionError or a hang.

The hypothesis test mutates real module texts (random modules, their optimized forms
with fusions, the examples' models). CI runs a bounded, derandomized number of examples;
``AXLE_PARSER_FUZZ_EXAMPLES=10000`` or ``tools/parser_fuzz.py`` runs the campaign."""
from __future__ import annotations

import functools
import os
import random
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

import axle
from axle.compiler import compile_module
from axle.interpreter import evaluate
from axle.errors import AxleError, CustomCallError, ParseError, ShapeError, VerifierError
from axle.ir import Builder, DType, TensorType, parse_module, parse_type
from axle.ir.ops import CUSTOM_CALL_TARGETS, register_custom_call
from axle.testing import IN_CI, require_backend
from axle.testing.ir_mutations import MUTATIONS, check_text, corpus

ROOT = Path(__file__).resolve().parents[2]
MODELS = str(ROOT / "examples" / "aot" / "models.py")

settings.register_profile(
    "parser-fuzz", max_examples=int(os.environ.get("AXLE_PARSER_FUZZ_EXAMPLES", "1000")), deadline=None,
    derandomize=IN_CI, database=None if IN_CI else settings.default.database,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@functools.cache
def _corpus() -> tuple[str, ...]:
    return tuple(corpus(MODELS))


def test_corpus_texts_parse_and_run():
    texts = _corpus()
    assert len(texts) >= 14
    assert any("fusion(" in t for t in texts) and any("custom-call(" in t for t in texts)
    assert [check_text(t) for t in texts] == ["ran"] * len(texts)


@settings(settings.get_profile("parser-fuzz"))
@given(data=st.data())
def test_mutated_texts_raise_only_axle_errors(data: st.DataObject):
    text = data.draw(st.sampled_from(_corpus()), label="base")
    mutations = data.draw(st.lists(st.sampled_from(MUTATIONS), min_size=1, max_size=3), label="mutations")
    rnd = data.draw(st.randoms(use_true_random=False), label="rnd")
    for mutation in mutations:
        text = mutation(text, rnd)
    note(text)
    try:
        check_text(text)
    except ParseError as e:
        # the error points into the text
        assert e.line is not None and e.column is not None and f"line {e.line}, column {e.column}" in str(e)


# ------------------------------------------------------------ regression cases (finding 11)

_HEAD = "module @m\nentry %m (x: f32[2]) -> f32[2] {\n  %x = f32[2] parameter(0)\n"


def _body(line: str) -> str:
    return _HEAD + f"  ROOT {line}\n}}\n"


@pytest.mark.parametrize("text, line, column, message", [
    # was AssertionError (gone under -O)
    pytest.param(_body("%y = f32[-7] negate(%x)"), 4, 13,
     "shape (-7,) must be a tuple of ints >= 0", id='negative-dim'),
    # were ValueError from int()
    pytest.param(_body("%y = f32[2,] negate(%x)"), 4, 19,
     "expected an integer (a dimension), found ']'", id='trailing-comma-in-shape'),
    pytest.param(_body("%y = f32[2] reduce(%x), axes={0,}, kind=sum"), 4, 40, "found '}'", id='trailing-comma-in-ints'),
    pytest.param(_body("%y = f32[2] parameter(=)"), 4, 30,
     "expected an integer (the parameter index), found '='", id='bad-parameter-index'),
    pytest.param(_body("%y = f32[2,3] constant({1, 2})"), 4, 32,
     "dimension 1 opens with '{'", id='literal-too-shallow'),
    pytest.param(_body("%y = f32[3] constant({1, 2})"), 4, 34,
     "dimension 0 has 3 elements, found 2 then '}'", id='literal-too-short'),
    pytest.param(_body("%c = s32[] custom-call(%x), target=oops, shape=[], dtype=s32"), 4, 43,
     "quoted string", id='unquoted-string'),
    # was RecursionError: a literal nested 5,000 deep
    pytest.param(_body("%y = f32[] constant(" + "{" * 5000 + "1" + "}" * 5000 + ")"), 4, 28,
     "an f32 element", id='literal-nested-5000-deep'),
    # values that changed silently
    pytest.param(_body("%y = s32[] constant(3000000000)"), 4, 28, "out of range for s32", id='s32-out-of-range'),
    pytest.param(_body("%y = s32[] constant(1.5)"), 4, 28, "1.5 is not an integer", id='s32-from-float'),
    pytest.param(_body("%y = f32[] constant(1e40)"), 4, 28, "1e40 is out of range for f32", id='f32-overflow'),
    pytest.param(_body("%y = pred[] constant(2)"), 4, 29, "expected true or false", id='pred-from-int'),
    # silently accepted: a wrong declared signature and result, a name defined twice
    pytest.param("module @m\nentry %m (x: f32[3]) -> f32[2] {\n  ROOT %x = f32[2] parameter(0)\n}\n", 2, 7,
     "the signature declares parameters (f32[3]) but the body defines (f32[2])", id='signature-mismatch'),
    pytest.param("module @m\nentry %m (x: f32[2]) -> f32[9] {\n  ROOT %x = f32[2] parameter(0)\n}\n", 2, 25,
     "declared to return f32[9] but its root %x is f32[2]", id='result-type-mismatch'),
    pytest.param(_HEAD + "  %x = f32[2] negate(%x)\n}\n", 4, 3,
     "%x is defined twice in %m (first on line 3)", id='name-defined-twice'),
    pytest.param(_HEAD + "  %y = f32[2] negate(%x)\n  ROOT %y.1 = f32[2] negate(%y)\n"
                 "  ROOT %z = f32[2] negate(%y)\n}\n",
     6, 3, "a second ROOT", id='second-root'),
    pytest.param(_body("%y = f32[2] reduce(%x), axes={0}, axes={0}, kind=sum"), 4, 42,
     "attribute axes is given twice", id='attribute-twice'),
    # was an endless loop: a truncated signature
    pytest.param("module @m\nentry %m (x: f32[2]", 2, 20, "found end of input", id='truncated-signature'),
    pytest.param("module @m\nentry %m (x: f32[2]) -> f32[2] {\n  %x = f32[2] parameter(0)", 3, 27,
     "not closed", id='unclosed-body'),
    # rank and size limits instead of NumPy errors at run time
    pytest.param(_body("%y = f32[" + ",".join(["1"] * 65) + "] negate(%x)"), 4, 13,
     "rank 65 is above the limit", id='rank-65'),
    pytest.param(_body("%y = f64[4611686018427387904,4] negate(%x)"), 4, 13, "holds more than", id='too-many-bytes'),
    pytest.param(_body("%y = f32[2] negate(%x) @"), 4, 31, "unexpected character '@'", id='stray-character'),
    # a comment's words never become tokens, even when what follows it does not parse
    pytest.param(_body("%y = f32[2] negate(%x) // f32[2] %z\n  ~"), 5, 3, "unexpected character '~'",
                 id='stray-character-after-comment'),
    pytest.param(_body("%y = f33[2] negate(%x)"), 4, 13, "unknown element type 'f33'", id='unknown-dtype'),
    pytest.param(_body("%y = f32[99999999999999999999] negate(%x)"), 4, 17, "does not fit in 64 bits",
                 id='dim-over-64-bits'),
])
def test_malformed_text_gives_parse_error_with_position(text, line, column, message):
    with pytest.raises(ParseError) as info:
        parse_module(text)
    e = info.value
    assert (e.line, e.column) == (line, column), str(e)
    assert message in str(e)
    src, caret = str(e).split("\n")[1:3]
    # a short excerpt of the line, the caret under the token
    assert caret.strip() == "^" and src.strip() and len(src) <= 80


def test_types_with_spaces_and_comments_parse_as_printed() -> None:
    """Array types are one token when written as the printer writes them; spaces inside
    (and comments between tokens) still parse, to the same module."""
    text = _body("%y = f32[2] negate(%x)")
    spaced = text.replace("f32[2]", "f32[ 2 ]").replace("negate(", "negate( // why\n  ")
    assert spaced != text and parse_module(spaced).as_text() == parse_module(text).as_text()


def test_parse_error_excerpt_points_at_the_token():
    with pytest.raises(ParseError) as info:
        parse_module(_body("%y = f32[2] frobnicate(%x)"))
    assert str(info.value).split("\n")[1:] == ["    ROOT %y = f32[2] frobnicate(%x)",
                                               "                     ^"]


def test_parse_type_errors_are_parse_errors():
    for bad in ("f32[2", "f32[-1]", "u128[2]", "c64[2]", "(f32[2])", "f32[2] x", ""):
        with pytest.raises(ParseError):
            parse_type(bad)
    assert parse_type("s64[2,0]") == TensorType(DType.INT64, (2, 0))
    assert parse_type("u32[2]") == TensorType(DType.UINT32, (2,))  # a dtype since issue 15


def test_tensor_type_validates_without_assert():
    with pytest.raises(ShapeError, match="ints >= 0"):
        TensorType(DType.FLOAT32, (-1,))
    with pytest.raises(ShapeError, match="ints >= 0"):
        TensorType(DType.FLOAT32, (2.0,))  # type: ignore[arg-type]
    with pytest.raises(ShapeError, match="rank 33"):
        TensorType(DType.FLOAT32, (1,) * 33)
    # the largest dot the limit allows (48 distinct dims) runs on the reference
    b = Builder("dot")
    x = b.parameter(TensorType(DType.FLOAT32, (1,) * 32))
    m = b.build(b.dot_general(x, x, lhs_contracting=tuple(range(16)), rhs_contracting=tuple(range(16))))
    assert evaluate(m, np.ones((1,) * 32, np.float32))[0].shape == (1,) * 32
    with pytest.raises(AxleError, match="not an axle dtype"):
        TensorType("f32", (1,))  # type: ignore[arg-type]


def test_literals_round_trip_exactly():
    text = _HEAD + ("  %a = s32[2] constant({-2147483648, 2147483647})\n"
                    "  %b = f16[3] constant({65504.0, -inf, nan})\n"
                    "  %c = pred[2,0] constant({})\n"
                    "  %d = f64[2,1] constant({{1e-300}, {-0.0}})\n"
                    "  ROOT %t = (s32[2], f16[3], pred[2,0], f64[2,1]) tuple(%a, %b, %c, %d)\n}\n")
    text = text.replace("-> f32[2]", "-> (s32[2], f16[3], pred[2,0], f64[2,1])")
    module = parse_module(text)
    assert parse_module(module.as_text()).entry == module.entry
    a, b, c, d = (n.attr["value"].array for n in module.entry.nodes if n.op.value == "constant")
    assert a.tolist() == [-2147483648, 2147483647]
    assert b[0] == np.float16(65504.0) and np.isneginf(b[1]) and np.isnan(b[2])
    assert c.shape == (2, 0) and d.tolist() == [[1e-300], [-0.0]] and np.signbit(d[1, 0])


# ------------------------------------------------------------- verifier and Builder cases


def test_unregistered_custom_call_is_a_verifier_error():
    register_custom_call("test.parser.double", lambda x, config: x * 2)
    b = Builder("cc")
    x = b.parameter("f32[2]")
    with pytest.raises(VerifierError) as info:
        b.build(b.custom_call(x, target="test.parser.nope", shape=(2,), dtype="f32"))
    msg = str(info.value)
    assert "'test.parser.nope' is not registered" in msg and "test.parser.double" in msg
    assert all(t in msg for t in CUSTOM_CALL_TARGETS)
    text = _body('%y = f32[2] custom-call(%x), target="test.parser.nope", shape=[2], dtype=f32')
    with pytest.raises(ParseError, match=r"line 4, column 20: custom-call target 'test.parser.nope' is not registered"):
        parse_module(text)
    ok = parse_module(text.replace("nope", "double"))
    exe = compile_module(ok, axle.device("interpreter:0"))
    (out,) = exe.execute([axle.device_put(np.ones(2, np.float32), "interpreter:0").buffer])
    assert out.handle.tolist() == [2.0, 2.0]


@pytest.mark.parametrize("backend", ["interpreter", "cpu", "opencl", "template"])
def test_custom_call_result_of_the_wrong_shape_is_an_axle_error(backend: str):
    """It used to be reshaped (ValueError when the sizes differ, a silent relayout when not)."""
    device = require_backend(backend)
    register_custom_call("test.parser.double", lambda x, config: x * 2)
    text = _body('%y = f32[2] custom-call(%x), target="test.parser.double", shape=[2], dtype=f32')
    for declared in ("f32[1,2]", "f32[7]"):
        bad = text.replace("-> f32[2]", f"-> {declared}").replace("f32[2] custom", f"{declared} custom")
        bad = bad.replace("shape=[2]", "shape=" + declared[3:])
        exe = compile_module(parse_module(bad), device)
        with pytest.raises(ShapeError, match=r"target 'test.parser.double' returned shape \[2\] for operands "
                                             r"\(f32\[2\]\); the node declares " + re.escape(declared)):
            exe.execute([axle.device_put(np.ones(2, np.float32), device).buffer])


def test_builder_refuses_no_roots_and_foreign_values():
    with pytest.raises(VerifierError, match="needs at least one root"):
        Builder().build()
    other = Builder("other").parameter("f32[2]")
    b = Builder("mine")
    with pytest.raises(VerifierError, match="not one of its parameters.*another Builder"):
        b.build(other)
    x = b.parameter("f32[2]")
    with pytest.raises(VerifierError, match="not one of its parameters"):
        b.build(b.add(x, other))
    with pytest.raises(VerifierError, match="root 0 is a int"):
        b.build(3)  # type: ignore[arg-type]
    # A traced function may return nothing (jit of ``lambda x: None``): only a Builder
    # called with no roots at all is refused, as that is a mistake.
    assert check_text("module @m\nentry %m () -> () {\n  ROOT %t = () tuple()\n}\n") == "ran"


def test_computation_with_misnumbered_parameters_is_refused():
    from axle.ir import Computation

    b = Builder("p")
    b.parameter("f32[2]")
    y = b.parameter("f32[2]")
    with pytest.raises(VerifierError, match="parameter 0 is"):
        Computation("c", (y,), y)


def test_no_assert_based_validation_under_python_O():
    """With asserts stripped the same inputs still give axle errors (they used to pass)."""
    script = textwrap.dedent(f"""
        from axle.errors import AxleError
        from axle.ir import DType, TensorType, parse_module, Builder
        bad = [{_body("%y = f32[-1] negate(%x)")!r}, {_body("%y = f32[2] parameter(0)")!r}]
        for text in bad:
            try:
                parse_module(text)
            except AxleError:
                continue
            raise SystemExit("accepted: " + text)
        try:
            TensorType(DType.FLOAT32, (-1,))
        except AxleError:
            pass
        else:
            raise SystemExit("TensorType accepted a negative dim")
        try:
            Builder().parameter(((2,), "tuple"))
        except AxleError:
            pass
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-O", "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stdout + out.stderr


def test_campaign_under_python_O_breaks_nothing():
    script = ("from axle.testing.ir_mutations import campaign, corpus\n"
              f"r = campaign(corpus({MODELS!r}, seeds=(0, 1)), 150, seed=7)\n"
              "assert not __debug__\n"
              "print(len(r.breaks), r.mutants)\n"
              "for b in r.breaks[:3]: print(b)\n")
    out = subprocess.run([sys.executable, "-O", "-c", script], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.split("\n")[0] == "0 150", out.stdout + out.stderr


def test_campaign_mutants_are_rebuilt_from_their_number():
    from axle.testing.ir_mutations import mutate

    texts = _corpus()
    rnd_a, rnd_b = random.Random(42), random.Random(42)
    assert mutate(rnd_a.choice(texts), rnd_a, 3) == mutate(rnd_b.choice(texts), rnd_b, 3)


@pytest.mark.parametrize("backend", ["interpreter", "cpu", "opencl", "template"])
def test_custom_call_target_that_raises_is_an_axle_error(backend: str):
    """A target called with operands it does not take (here: none) raised the target's own
    TypeError from inside axle (found by the parser campaign)."""
    device = require_backend(backend)
    register_custom_call("test.parser.unary", lambda x, config: x * 2)
    text = """module @m

entry %m () -> f32[2] {
  ROOT %y = f32[2] custom-call(), target="test.parser.unary", shape=[2], dtype=f32
}
"""
    exe = compile_module(parse_module(text), device)
    with pytest.raises(CustomCallError, match=r"target 'test.parser.unary' failed on operands \(\): TypeError"):
        exe.execute([])
