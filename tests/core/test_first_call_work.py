"""Work a cached program's first call no longer does (counted, never timed): the compile
path's walks over a traced module (printing it for its cache key, the placement checks, the
expansion of extended ops) skip what cannot change their result. Each test fails on the
code before the change that cut that work."""
from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest

import axle
from axle import partition
from axle.errors import OpAttributeError
from axle.ir import printer
from axle.ir.builder import Builder
from axle.ir.dtypes import DType
from axle.ir.module import Module
from axle.ir.ops import OPS, Op
from axle.ir.parser import parse_module
from axle.ir.types import TensorType
from axle.passes import expand

F32 = DType.FLOAT32


def _module() -> Module:
    b = Builder("f-1 x")  # a module name the printer must make safe
    x = b.parameter(TensorType(F32, (4, 3)))
    y = b.reduce(b.exp(b.add(x, x)), axes=(1,), kind="max")
    return b.build(b.transpose(b.broadcast_in_dim(y, shape=(3, 4), broadcast_dimensions=(1,)), permutation=(1, 0)))


def test_expansion_without_extended_ops_rebuilds_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    m = _module()

    def no_rebuild(*_: object) -> None:
        raise AssertionError("a module without extended ops was rebuilt")

    monkeypatch.setattr(expand, "rebuild_module", no_rebuild)
    out, done = expand.expand_extended(m, lambda n: False)
    assert out is m and not done


def test_print_module_walks_the_computations_once(monkeypatch: pytest.MonkeyPatch) -> None:
    m = _module()
    calls = []
    walk = Module.computations
    monkeypatch.setattr(Module, "computations", lambda self: calls.append(1) or walk(self))
    text = printer.print_module(m)
    assert len(calls) == 1
    assert parse_module(text).as_text() == text  # the text form is unchanged


@pytest.mark.parametrize("name", ["x", "add.3", "a-b_c", "1x", "", "f-1 x", "é", "_", ".x", "x y.z"])
def test_safe_name_as_the_substitution_made_it(name: str) -> None:
    out = re.sub(r"[^A-Za-z0-9_.\-]", "_", name) or "v"
    assert printer.safe_name(name) == (out if re.match(r"^[A-Za-z_][A-Za-z0-9_.\-]*$", out) else "v" + out)


def test_placement_measures_no_buffer_without_a_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    dev = axle.device("interpreter:0")
    caps = axle.REGISTRY.backend_for(dev).capabilities(dev)
    assert not any(k in caps.limits for k in partition._BUFFER_LIMITS)
    measured = []
    monkeypatch.setattr(partition, "_BUFFER_LIMITS",
                        {k: (unit, lambda t, f=f: measured.append(t) or f(t))
                         for k, (unit, f) in partition._BUFFER_LIMITS.items()})
    assert partition.unsupported_nodes(_module(), caps) == []
    assert not measured
    # a device with a limit still measures, and refuses what is over it
    limited = dataclasses.replace(caps, limits={**caps.limits, "max_elements": 5})
    refused = partition.unsupported_nodes(_module(), limited)
    assert measured and refused and "above the device's max_elements=5" in refused[0][1]


def test_an_int_tuple_attribute_is_taken_as_it_is_and_others_are_still_checked() -> None:
    spec = OPS[Op.TRANSPOSE].attr_spec("permutation")
    given = (1, 0)
    assert spec.coerce(Op.TRANSPOSE, given) is given  # no new tuple, no per-element call
    out = spec.coerce(Op.TRANSPOSE, (np.int64(1), 0))
    assert out == (1, 0) and all(type(v) is int for v in out)
    for bad in [(True, 0), (1.0, 0), ("1", 0)]:
        with pytest.raises(OpAttributeError, match="permutation"):
            spec.coerce(Op.TRANSPOSE, bad)
    shape = OPS[Op.BROADCAST_IN_DIM].attr_spec("shape")
    with pytest.raises(OpAttributeError, match="shape"):
        shape.coerce(Op.BROADCAST_IN_DIM, (3, -1))
