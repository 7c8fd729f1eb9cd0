"""The optimized module in the persistent compile cache (axle.module_cache): a later
compile of the same traced module skips the optimizer and gets the same module (fusion
records included) and the same results; a truncated, bit-flipped or unparsable entry is
optimized again; a setting, the pipeline or the code changing is another key; two
processes filling one cache at once leave whole entries; and a new process keys the object
code by the optimized module's digest (no kernel described)."""
from __future__ import annotations

import hashlib
import json
import os
import textwrap

import numpy as np
import pytest

import axle
import axle.numpy as anp
from axle import module_cache
from axle.config import config
from axle.device_compile import compile_on_device, expand_for

DEV = "cpu:0"


def _counts() -> dict[str, int]:
    s = axle.stats()
    return {k[len("disk_cache_"):]: s[k] for k in s if k.startswith("disk_cache_")}


def _step(x, w):  # noqa: ANN001, ANN202
    h = anp.tanh(x @ w + 1)
    return h - axle.nn.logsumexp(h, axis=1, keepdims=True)


X = np.random.default_rng(0).standard_normal((8, 16)).astype(np.float32)
W = np.random.default_rng(1).standard_normal((16, 4)).astype(np.float32)


def _traced():  # noqa: ANN202
    return axle.jit(_step, device=DEV).lower(X, W).module


def _compile():  # noqa: ANN202
    return compile_on_device(_traced(), axle.device(DEV))


def _run(exe) -> np.ndarray:  # noqa: ANN001
    dev = axle.device(DEV)
    backend = axle.REGISTRY.backend_for(dev)
    out = exe.execute([backend.to_device(X, dev), backend.to_device(W, dev)])
    return backend.to_host(out[0])


def _entry(root) -> str:  # noqa: ANN001
    (name,) = os.listdir(root / "module")
    return str(root / "module" / name)


def test_a_second_compile_loads_the_optimized_module(compile_cache, monkeypatch) -> None:
    axle.reset_stats()
    exe, optimized = _compile()
    assert _counts()["writes"] >= 1 and os.listdir(compile_cache / "module")
    want = _run(exe)

    def no_passes(*a, **k):  # noqa: ANN002, ANN003, ANN202
        raise AssertionError("the optimizer ran on a cached module")

    monkeypatch.setattr("axle.device_compile.optimize_for", no_passes)
    axle.reset_stats()
    exe2, loaded = _compile()
    # (one miss: the thread splits, stored only once measured on later calls)
    assert _counts()["hits"] >= 1 and _counts()["misses"] == 1
    assert loaded.as_text() == optimized.as_text()
    assert loaded.fusion_records == optimized.fusion_records and loaded.fusion_records
    for r in loaded.fusion_records:  # bound to the loaded module's fused computations
        assert loaded.fusion_record(next(n for c in loaded.computations() for n in c.nodes
                                         if n.op.value == "fusion" and n.attr["computation"] is r.computation)) is r
    np.testing.assert_array_equal(_run(exe2), want)


def _whole_entry(text: str, digest: str | None = None) -> bytes:
    """An entry as module_cache.entry writes it: the digest (of ``text`` unless given), then
    the JSON."""
    digest = hashlib.sha256(text.encode()).hexdigest() if digest is None else digest
    return (digest + "\n").encode() + json.dumps({"module": text, "records": []}).encode()


@pytest.mark.parametrize("damage", ["truncate", "flip a bit", "not a module", "another digest", "no digest"])
def test_a_damaged_entry_is_optimized_again(compile_cache, damage: str) -> None:
    exe, optimized = _compile()
    want = _run(exe)
    path = _entry(compile_cache)
    if damage in ("not a module", "another digest", "no digest"):  # whole entries (right checksums)
        key = module_cache.module_key(expand_for(_traced(), axle.device(DEV))[0], axle.device(DEV),
                                      axle.REGISTRY.backend_for(axle.device(DEV)))
        text = optimized.as_text()
        module_cache.store(key, {
            "not a module": _whole_entry("module @m\n%bad"),  # a text that does not parse
            "another digest": _whole_entry(text, hashlib.sha256(b"another module").hexdigest()),
            "no digest": json.dumps({"module": text, "records": []}).encode(),  # the format before
        }[damage])
    else:
        data = bytearray(open(path, "rb").read())
        if damage == "truncate":
            data = data[: len(data) // 2]
        else:
            data[len(data) // 2] ^= 0x10
        open(path, "wb").write(bytes(data))
    axle.reset_stats()
    exe2, again = _compile()
    assert _counts()["corrupt"] == 1 and _counts()["writes"] >= 1  # optimized and stored again
    assert again.as_text() == optimized.as_text()
    np.testing.assert_array_equal(_run(exe2), want)
    axle.reset_stats()
    _compile()
    # (one miss: the thread splits, stored only once measured on later calls)
    assert _counts()["corrupt"] == 0 and _counts()["misses"] == 1


def test_a_hit_the_backend_has_the_executable_of_parses_no_json(compile_cache, monkeypatch) -> None:
    """A first call's compile (``keep_module=False``) whose executable the backend keeps
    under the optimized module's digest reads that digest from the entry's head: the
    entry's JSON (the module text and the fusion records) is not parsed."""
    # shapes of its own: a program no earlier test compiled in this process (whose kernels
    # the backend holds then, so it would write no plan for this module's digest)
    dev = axle.device(DEV)
    backend = axle.REGISTRY.backend_for(dev)
    x, w = np.ones((7, 13), np.float32), np.full((13, 5), 0.5, np.float32)

    def traced():  # noqa: ANN202
        return axle.jit(_step, device=DEV).lower(x, w).module

    def run(exe) -> np.ndarray:  # noqa: ANN001
        return backend.to_host(exe.execute([backend.to_device(x, dev), backend.to_device(w, dev)])[0])

    exe, _ = compile_on_device(traced(), dev, keep_module=False)
    want = run(exe)

    class NoParse:
        dumps = staticmethod(json.dumps)

        @staticmethod
        def loads(*a, **k):  # noqa: ANN002, ANN003, ANN205
            raise AssertionError("the cached module's JSON was parsed")

    monkeypatch.setattr(module_cache, "json", NoParse)
    axle.reset_stats()
    exe2, _ = compile_on_device(traced(), dev, keep_module=False)
    assert _counts()["hits"] >= 1 and _counts()["corrupt"] == 0 and _counts()["writes"] == 0
    np.testing.assert_array_equal(run(exe2), want)


def test_the_key_changes_with_settings_pipeline_and_code(monkeypatch) -> None:
    dev = axle.device(DEV)
    backend = axle.REGISTRY.backend_for(dev)
    module = expand_for(_traced(), dev)[0]
    base = module_cache.module_key(module, dev, backend)
    assert module_cache.module_key(expand_for(_traced(), dev)[0], dev, backend) == base
    other = expand_for(axle.jit(_step, device=DEV).lower(X[:4], W).module, dev)[0]
    assert module_cache.module_key(other, dev, backend) != base  # another shape
    changes = [
        lambda: monkeypatch.setattr(config, "disable_passes", "cse"),
        lambda: monkeypatch.setitem(config.backend_flags, "cpu_blas", "true"),
        lambda: monkeypatch.setattr(type(backend), "passes", lambda self: [axle.passes.FunctionPass("x", lambda m: m)]),
        lambda: monkeypatch.setattr(module_cache, "code_version", lambda *dirs: "edited"),
        lambda: monkeypatch.setattr(module_cache, "FORMAT", "axle-optimized-module-0"),
    ]
    for change in changes:
        change()
        assert module_cache.module_key(module, dev, backend) != base
        monkeypatch.undo()
        assert module_cache.module_key(module, dev, backend) == base


def test_off_reads_and_writes_no_module(compile_cache, monkeypatch) -> None:
    monkeypatch.setattr(config, "compile_cache", "off")
    axle.reset_stats()
    _compile()
    assert not compile_cache.exists() and _counts()["writes"] == 0 and _counts()["hits"] == 0


PROGRAM = textwrap.dedent("""
    import json, sys
    import numpy as np
    import axle, axle.numpy as anp

    def step(x, w):
        h = anp.tanh(x @ w + 1)
        return h - axle.nn.logsumexp(h, axis=1, keepdims=True), (x * x).sum(axis=0)

    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, 16)).astype(np.float32)
    w = rng.standard_normal((16, 4)).astype(np.float32)
    f = axle.jit(step, device="cpu:0")
    got = [f(x, w) for _ in range(3)][0]  # three calls: the kernels' thread splits are decided
    s = axle.stats()
    print(json.dumps({"out": [np.asarray(g).tobytes().hex() for g in got], **calls,
                      **{k: s[k] for k in s if k.startswith("disk_cache_")}}))
""")


def test_two_writers_then_a_new_process_hits_everything_and_computes_the_same(tmp_path,
                                                                              python_processes) -> None:
    """The cache off; two processes filling an empty cache at the same time (both write
    every entry: one whole entry stays); then a new process: the same bits each time, and
    the last one parses, optimizes, plans and emits nothing (its plan and object code
    keyed by the module's digest)."""
    cache = str(tmp_path / "c")
    run = python_processes
    program = run.counting(("axle.module_cache", "parse_module", "parse"), ("axle.passes", "optimize", "optimize"),
                           ("axle_cpu.plan", "build_plan", "plan"), ("axle_cpu.executable", "llvm_module", "emit"))
    program += PROGRAM
    off = run.answer(run.start(program, "off", "cpu"))
    fills = [run.answer(p) for p in [run.start(program, cache, "cpu"), run.start(program, cache, "cpu")]]
    hit = run.answer(run.start(program, cache, "cpu"))
    assert off["out"] == fills[0]["out"] == fills[1]["out"] == hit["out"]
    entries = sum(len(files) for _, _, files in os.walk(cache))
    # the module, its object code, the native step runner's, the thread splits and the
    # pool's wake-up cost (which the last process does not read: the splits are decided)
    assert entries >= 5 and all(f["disk_cache_writes"] >= 1 and f["disk_cache_corrupt"] == 0 for f in fills)
    assert hit["disk_cache_hits"] == entries - 1 and hit["disk_cache_misses"] == 0
    assert hit["disk_cache_writes"] == 0 and hit["disk_cache_corrupt"] == 0
    # the executable from the plan and object code under the module's digest: nothing
    # parsed, optimized, planned or emitted (CpuBackend.cached_executable)
    assert hit["parse"] == hit["optimize"] == hit["plan"] == hit["emit"] == 0
    assert off["optimize"] and off["plan"] and off["emit"]


def test_explain_shows_the_code_of_a_partitioned_program_the_cache_holds(compile_cache) -> None:
    """explain of a program compiled in parts (pmap's replicas and collectives), compiled a
    second time with every part in the compile cache: each part is compiled keeping its
    code (as ``lower().compile()`` does for a whole program), so the listing is there, not
    an error that the cached executable kept no LLVM IR."""
    def step(w, x):  # noqa: ANN001, ANN202
        g = axle.lax.pmean(axle.grad(lambda w: ((x @ w) ** 2).sum())(w), "d")
        return w - 0.1 * g

    args = np.ones((2, 3, 2), np.float32), np.ones((2, 8, 3), np.float32)
    first = axle.pmap(step, axis_name="d", devices=[DEV, DEV]).lower(*args).explain().text()
    assert _counts()["writes"] > 0
    again = axle.pmap(step, axis_name="d", devices=[DEV, DEV]).lower(*args).explain().text()
    assert _counts()["hits"] > 0 and "define" in again and again == first
