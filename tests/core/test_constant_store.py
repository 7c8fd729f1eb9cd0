"""Large constants beside the compile cache's entries (axle.constant_store): the text form's
``ref "<digest>"`` prints and parses back, the stored bytes round-trip every dtype, a
truncated, bit-flipped or missing file is refused (and removed, so that it is written
again), and the files count toward the cache's size bound."""
from __future__ import annotations

import gc
import os

import ml_dtypes
import numpy as np
import pytest

from axle import constant_store, diskcache, module_cache
from axle.errors import ParseError
from axle.ir.builder import Builder, make_node
from axle.ir.dtypes import dtype as to_dtype
from axle.ir.literal import Literal, array_digest
from axle.ir.module import Computation, Module
from axle.ir.ops import Op
from axle.ir.parser import parse_module
from axle.ir.printer import print_module
from axle.ir.types import TensorType


def _module(value: np.ndarray) -> Module:
    """x + value, the constant of ``value``'s type."""
    b = Builder("m")
    p = b.parameter(TensorType(to_dtype(value.dtype), value.shape), name="x")
    root = make_node(Op.ADD, (p, b.constant(value)), {})
    return Module("m", Computation("m", (p,), root))


def test_a_constant_by_reference_prints_and_parses_back() -> None:
    w = np.random.default_rng(0).standard_normal((64, 300)).astype(np.float32)
    m = _module(w)
    store: dict[str, Literal] = {}

    def refs(lit: Literal) -> str | None:
        if lit.array.size < 1000:
            return None
        store[lit.digest()] = lit
        return lit.digest()

    text = print_module(m, refs)
    assert f'ref "{Literal(w).digest()}"' in text and len(text) < 1000
    back = parse_module(text, lambda name, t: store[name])
    assert print_module(back) == print_module(m)
    with pytest.raises(ParseError, match="no store of constants"):
        parse_module(text)
    with pytest.raises(ParseError, match="not here"):
        parse_module(text, lambda name, t: (_ for _ in ()).throw(ValueError("not here")))
    with pytest.raises(ParseError, match="not a f32"):  # a store answering another type
        parse_module(text, lambda name, t: Literal(np.zeros((2, 2), np.float32)))


def test_a_live_literal_is_taken_from_memory(compile_cache) -> None:  # noqa: ANN001
    lit = Literal(np.random.default_rng(4).standard_normal((300, 100)).astype(np.float32))
    digest = constant_store.put(lit.array, lit.digest())
    assert constant_store.get(digest, lit.array.dtype, lit.array.shape) is lit.array
    del lit
    gc.collect()
    got = constant_store.get(digest, np.dtype(np.float32), (300, 100))  # from the disk now
    assert got.shape == (300, 100) and Literal(got).digest() == digest


def test_big_literals_hash_and_compare_by_digest() -> None:
    a = np.random.default_rng(5).standard_normal((200, 200)).astype(np.float32)
    b = a.copy()
    b[-1, -1] = np.nextafter(b[-1, -1], np.float32(np.inf))
    assert Literal(a) == Literal(a.copy()) and hash(Literal(a)) == hash(Literal(a.copy()))
    assert Literal(a) != Literal(b)
    owned = a.copy()
    lit = Literal(owned, adopt=True)  # kept as it is when it starts on a 64-byte boundary
    assert (lit.array is owned) == (owned.ctypes.data % 64 == 0) and lit.array.ctypes.data % 64 == 0
    assert not lit.array.flags.writeable
    assert Literal(a[::2], adopt=True).array.flags.c_contiguous  # a view is copied


def test_digests_name_the_content() -> None:
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    assert Literal(a).digest() == Literal(a.copy()).digest()
    assert Literal(a).digest() != Literal(a.reshape(4, 3)).digest()  # the shape is named
    assert Literal(a).digest() != Literal(a.view(np.int32)).digest()  # and the dtype
    assert Literal(a).digest() == Literal(a.astype(">f4")).digest()  # not the byte order
    # an array given as it is (a backend's plan constant, constant_store.put): its values'
    # little-endian bytes whatever its byte order (a big-endian one was hashed as it lay)
    assert array_digest(a.astype(">f4")) == array_digest(a) == Literal(a).digest()


@pytest.mark.parametrize("dt", [np.float32, np.float64, np.int8, np.uint16, np.bool_, ml_dtypes.bfloat16])
def test_stored_constants_round_trip(compile_cache, dt) -> None:  # noqa: ANN001
    a = (np.random.default_rng(1).standard_normal((300, 70)) * 3).astype(dt)
    digest = constant_store.put(a)
    got = constant_store.get(digest, np.dtype(dt), a.shape)
    np.testing.assert_array_equal(got.view(np.uint8), a.view(np.uint8))


def test_a_corrupt_or_missing_constant_is_refused_and_removed(compile_cache) -> None:  # noqa: ANN001
    a = np.random.default_rng(2).standard_normal((200, 100)).astype(np.float32)
    digest = constant_store.put(a)
    (name,) = os.listdir(compile_cache / "const")
    path = compile_cache / "const" / name
    data = path.read_bytes()
    path.write_bytes(data[:-7])  # truncated
    with pytest.raises(constant_store.MissingConstant):
        constant_store.get(digest, a.dtype, a.shape)
    assert not path.exists()
    constant_store.put(a)  # written again
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 1  # a flipped bit
    path.write_bytes(bytes(raw))
    constant_store._WHOLE.clear()  # (as in a new process: this one wrote it whole)
    constant_store.put(a)  # a corrupt file is not taken as stored: rewritten
    np.testing.assert_array_equal(constant_store.get(digest, a.dtype, a.shape), a)
    with pytest.raises(constant_store.MissingConstant):  # another size than the entry says
        constant_store.get(digest, a.dtype, (100, 100))
    with pytest.raises(constant_store.MissingConstant):  # never stored
        constant_store.get("0" * 64, a.dtype, a.shape)


def test_module_entries_name_large_constants_and_the_files_count_toward_the_bound(compile_cache) -> None:  # noqa: ANN001
    w = np.random.default_rng(3).standard_normal((256, 256)).astype(np.float32)
    payload, digest = module_cache.entry(_module(w))
    assert len(payload) < 4096  # 256 KiB of weights named by digest, not written as base64
    sizes = {os.path.basename(p): size for _, size, p in diskcache._entries(str(compile_cache))}
    (name,) = os.listdir(compile_cache / "const")
    assert sizes[name] > w.nbytes
    entry = module_cache.Entry(digest, payload[65:])
    back = module_cache.parse_entry(entry)
    assert back is not None and print_module(back) == print_module(_module(w))
    os.unlink(compile_cache / "const" / name)  # evicted: the entry is a miss (optimized again)...
    assert module_cache.parse_entry(entry) is not None  # (... unless this process holds the constant)
    del back
    gc.collect()
    assert module_cache.parse_entry(entry) is None


def test_a_structural_key_names_a_big_constant_by_digest() -> None:
    # the backends' caches keep these keys: a key holding the array kept a compiled model's
    # weights alive a second time
    w = np.random.default_rng(6).standard_normal((256, 256)).astype(np.float32)
    key = _module(w).entry.structural_key

    def arrays(v: object) -> int:
        if isinstance(v, tuple):
            return sum(arrays(x) for x in v)
        return int(isinstance(v, (Literal, np.ndarray)))

    assert arrays(key) == 0
    assert key == _module(w.copy()).entry.structural_key
    w2 = w.copy()
    w2[0, 0] += 1
    assert key != _module(w2).entry.structural_key
    small = np.ones(4, np.float32)  # small constants stay in the key as they are
    assert arrays(_module(small).entry.structural_key) == 1


def test_a_kernel_plan_reads_a_big_constant_where_it_lies() -> None:
    # (a copy per plan held a model's weights twice: GPT-2's 154 MB embedding)
    from axle.lowering.plan import kernel_plan

    w = np.random.default_rng(7).standard_normal((256, 256)).astype(np.float32)
    m = _module(w)
    lit = next(n.attr["value"] for n in m.entry.nodes if n.op is Op.CONSTANT)
    (big,) = kernel_plan(m).constants.values()
    assert big is lit.array and not big.flags.writeable and big.ctypes.data % 64 == 0
    small = _module(np.ones(8, np.float32))
    (copy,) = kernel_plan(small).constants.values()
    assert copy.flags.writeable  # small ones are the plan's own copies, as before


def test_a_constant_evicted_after_this_process_stored_it_is_written_again(compile_cache) -> None:  # noqa: ANN001
    # A model compiled for a second shape writes entries naming the weights this process
    # stored for the first: when eviction removed their file meanwhile, those entries named
    # a missing constant (a miss, compiled again, in every later process until one wrote it)
    w = np.random.default_rng(8).standard_normal((256, 256)).astype(np.float32)
    module_cache.entry(_module(w))
    (name,) = os.listdir(compile_cache / "const")
    path = compile_cache / "const" / name
    old = path.stat().st_mtime - 3600
    os.utime(path, (old, old))
    module_cache.entry(_module(w.copy()))  # (another Literal, the same digest)
    assert path.stat().st_mtime > old + 1800  # named again: as recent as the entries naming it
    os.unlink(path)  # evicted
    payload, digest = module_cache.entry(_module(w.copy()))
    assert path.exists()
    constant_store._WHOLE.clear()  # (as in a new process)
    gc.collect()
    back = module_cache.parse_entry(module_cache.Entry(digest, payload[65:]))
    assert back is not None and print_module(back) == print_module(_module(w))
