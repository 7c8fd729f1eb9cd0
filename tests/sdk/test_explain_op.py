"""axle explain-op: one op's whole story (op table, rules, shared tables, fusion, each
backend's claim and lowering), the optional Backend.lowering_entries, and docs/ops/."""
from __future__ import annotations

import filecmp
import inspect
import re
import textwrap
from collections.abc import Sequence
from pathlib import Path

import pytest

from axle import explain_op as eo
from axle.autodiff import rules
from axle.backend import Capabilities, Device, LoweringEntry
from axle.backends.interpreter import InterpreterBackend
from axle.cli import main
from axle.errors import ArgumentError
from axle.ir import numerics, ops
from axle.ir.dtypes import DType
from axle.ir.module import Node
from axle.ir.dotdims import DotDims
from axle.ir.opcodes import Op
from axle.lowering import c as clower
from axle.testing import require_backend

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs" / "ops"


def source(fn: object) -> str:
    """The source text explain-op must show for ``fn``."""
    return textwrap.dedent(inspect.getsource(fn)).strip()


def run(argv: Sequence[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    rc = main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.fixture(scope="module", autouse=True)
def in_tree() -> None:
    for name in eo.IN_TREE_BACKENDS:
        require_backend(name)


def sections(out: str) -> list[str]:
    return re.findall(r"^## (.+?)(?: \(|$)", out, flags=re.M)


def test_tanh_prints_every_section_with_its_source(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run(["explain-op", "tanh"], capsys)
    assert rc == 0
    assert sections(out) == ["Op table entry", "Transformation rules", "Decomposition", "Approximation constants",
                             "Fusion", "Backends"]
    # the op table: its row, the rules' and the reference's source with file:line
    assert "(Op.TANH, np.tanh, _EW_T)," in out
    for fn in (ops._first_shape, ops._same_dtype, ops._float_unary, rules._tanh):
        assert source(fn) in out
    assert "with f = numpy.tanh" in out
    assert re.search(r"`axle/ir/ops\.py:\d+`", out) and "- traits: elementwise, transcendental, fusible" in out
    # rule tables: VJP, JVP and batching, each from its table
    assert "`VJP[Op.TANH]`" in out and "Op.TANH: _tanh," in out
    assert "`JVP[Op.TANH]`" in out and "`BATCH[Op.TANH]`" in out and "def _elementwise(" in out
    assert "## Decomposition\n\nnone: a core primitive" in out
    # the approximation constants backends inline
    for name in numerics.APPROXIMATIONS[Op.TANH]:
        assert f"`{name}` (`axle/ir/numerics.py:" in out
    assert "TANH_F32 = RationalTanh(" in out
    assert "- class: loop (elementwise)" in out and "inline cost weight: 30 per evaluation (transcendental)" in out
    # every installed backend: its claim, and where the in-tree ones lower tanh
    for info in eo.installed_backends():
        assert f"### {info.name}" in out
        if info.backend is not None:
            assert f"- claims tanh on {info.name}:0 for operand dtypes f16, f32, f64" in out
    from axle_cpu import mathfns
    from axle_opencl import render, values

    assert "`LOWERING[Op.TANH]` (`axle_cpu/emitter.py:" in out and source(mathfns.tanh) in out
    assert "`CL.float_unary_override[Op.TANH]` (`axle_opencl/render.py:" in out and source(render._tanh) in out
    assert source(values.Renderer._vector_tanh) in out
    assert "`FLOAT_UNARY[Op.TANH]` (`axle/lowering/c.py:" in out and "class Dialect(C99):" in out


def test_reduce_shows_the_reduce_kinds_and_each_backends_reduction(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run(["explain-op", "reduce"], capsys)
    assert rc == 0
    assert sections(out) == ["Op table entry", "Transformation rules", "Decomposition", "Reduce kinds", "Fusion",
                             "Backends"]
    assert "  - `kind`: enum, one of sum, prod, max, min, and, or" in out
    for fn in (ops._reduce_shape, ops._reduce, rules._reduce):
        assert source(fn) in out
    assert "| sum | add | 0.0 | 0 | False | f32 |" in out and "| max | maximum | -inf | -2147483648 | False | f16 |" in out
    assert "REDUCE_KINDS: dict[str, ReduceKind] = {" in out
    assert "- class: reduction:" in out
    from axle_cpu import emitter
    from axle_opencl import kernels

    assert source(emitter._reduce).splitlines()[0] in out and "_COMBINE: dict[Op," in out
    assert source(kernels.group_reduce_kernel).splitlines()[0] in out
    assert source(clower.accumulator) in out


@pytest.mark.parametrize("name", ["dot", "dot_general", "matmul", "DOT"])
def test_dot_accepts_its_names_and_shows_the_dimension_split(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run(["explain-op", name], capsys)
    assert rc == 0 and out.startswith("# dot\n")
    assert sections(out) == ["Op table entry", "Transformation rules", "Decomposition", "Dimension split", "Fusion",
                             "Backends"]
    assert "batch=8, m=2, n=4, k=3" in out and source(DotDims.from_attrs) in out
    assert source(ops._dot_shape) in out and source(rules._dot) in out
    assert "- class: contraction:" in out
    from axle_cpu import gemm
    from axle_opencl import dots

    assert source(gemm.emit) in out and source(dots.dot_kernel).splitlines()[0] in out
    assert "- does not claim dot on template:0: the partitioner runs it on the host" in out


def test_enum_and_ir_names_name_the_same_op() -> None:
    assert eo.find_op("exp") is eo.find_op("exponential") is Op.EXP
    assert eo.find_op("get_tuple_element") is eo.find_op("get-tuple-element") is Op.GET_TUPLE_ELEMENT
    assert eo.find_op(Op.SIN) is Op.SIN


def test_unknown_name_is_an_axle_error_with_close_matches(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ArgumentError, match=r"unknown op 'tanhh'; did you mean tanh"):
        eo.find_op("tanhh")
    rc, out, err = run(["explain-op", "reduse"], capsys)
    assert rc == 2 and out == "" and "unknown op 'reduse'; did you mean reduce" in err
    rc, _, err = run(["explain-op", "zzz"], capsys)
    assert rc == 2 and "ops: abs, add, " in err and ", and, " in err  # nothing close: every name
    rc, _, err = run(["explain-op"], capsys)
    assert rc == 2 and "name an op" in err


def _last_axis_only(n: Node) -> str | None:
    return None if n.attr["axes"] == (n.operands[0].tensor_type.rank - 1,) else "reduces the last axis only"


class _Described(InterpreterBackend):
    """A plugin using every form of LoweringEntry, a wrong name among them, and a predicate."""

    def capabilities(self, device: Device) -> Capabilities:
        return Capabilities(ops=frozenset({Op.REDUCE, Op.TANH}), dtypes=frozenset({DType.FLOAT32, DType.FLOAT64}),
                            op_dtypes={Op.REDUCE: frozenset({DType.FLOAT32})}, predicates={Op.REDUCE: _last_axis_only})

    def lowering_entries(self, op: Op) -> list[LoweringEntry]:
        return [LoweringEntry("an object", clower.convert),
                LoweringEntry("a table with the op", "axle.lowering.c:FLOAT_UNARY", op),
                LoweringEntry("a table without it", "axle.lowering.c:INT_UNARY", op),
                LoweringEntry("a renamed function", "axle.lowering.c:no_such_function")]


def test_lowering_entries_is_optional_and_each_form_is_shown() -> None:
    plain = eo.explain_op("tanh", [eo.BackendInfo("interpreter", InterpreterBackend())])
    assert "def eval_node(" in plain

    class Silent(InterpreterBackend):
        def lowering_entries(self, op: Op) -> list[LoweringEntry]:
            return super(InterpreterBackend, self).lowering_entries(op)  # the contract's default

    out = eo.explain_op("tanh", [eo.BackendInfo("interpreter", Silent())])
    assert "Lowering: not described (the backend does not implement `Backend.lowering_entries`)." in out
    out = eo.explain_op("tanh", [eo.BackendInfo("interpreter", _Described())])
    assert source(clower.convert) in out
    assert "a table with the op: `FLOAT_UNARY[Op.TANH]`" in out and "a table without it" not in out
    assert "a renamed function: cannot resolve `axle.lowering.c:no_such_function` (AttributeError" in out
    out = eo.explain_op("reduce", [eo.BackendInfo("interpreter", _Described())])
    assert "- claims reduce on interpreter:0 for operand dtypes f32\n- not for pred, s32, s64, f16, f64" in out
    assert "Predicate (returns the refusal reason, None to accept)" in out and source(_last_axis_only) in out
    out = eo.explain_op("dot", [eo.BackendInfo("interpreter", _Described())])
    assert "- does not claim dot on interpreter:0: the partitioner runs it on the host" in out
    out = eo.explain_op("tanh", [eo.BackendInfo("gone", None, "no driver")])
    assert "### gone\n\nunavailable here: no driver" in out


def test_every_claimed_op_is_described_by_the_in_tree_backends() -> None:
    for info in eo.in_tree_backends():
        assert info.backend is not None
        for op in Op:
            claimed, _ = eo.claim(info.backend, op)
            entries = info.backend.lowering_entries(op)
            assert entries or not claimed, f"{info.name} claims {op.value} but does not say where it lowers it"
            for e in entries:
                if isinstance(e.where, str):  # every name resolves (a moved table is caught here)
                    eo.refs.resolve(e.where, type(info.backend).__module__.split(".")[0])


def test_docs_ops_is_current(tmp_path: Path) -> None:
    written = eo.write_docs(tmp_path)
    assert len(written) == len(Op) + 1
    regen = "regenerate with `make docs-ops` and commit docs/ops/"
    assert DOCS.is_dir(), f"docs/ops/ is missing: {regen}"
    got = sorted(p.name for p in DOCS.iterdir())
    want = sorted(p.name for p in written)
    assert got == want, f"docs/ops/ has {sorted(set(got) - set(want))}, lacks {sorted(set(want) - set(got))}: {regen}"
    _, stale, errors = filecmp.cmpfiles(DOCS, tmp_path, want, shallow=False)
    assert not stale and not errors, f"stale pages in docs/ops/: {stale + errors}; {regen}"
    for p in written:
        text = p.read_text()
        assert "cannot resolve" not in text and str(REPO) not in text and not re.search(r"\.py:\d+`", text), p.name
