"""The template backend stays small and readable, and `axle new-backend` renames it fully."""
from __future__ import annotations

import ast
import io
import re
import sys
import tokenize
from pathlib import Path

import numpy as np
import pytest

import axle
from axle.errors import AxleError
from axle.scaffold import new_backend, template_dir
from axle.testing import require_backend

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "backends" / "template"
HARDWARE_PLACES = ("allocate", "copy in", "copy out", "render a fusion", "compile", "launch", "synchronize")


def code_lines(source: str) -> int:
    """Lines holding code: no blank lines, comments or docstrings."""
    tree = ast.parse(source)
    doc_lines: set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) \
                and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
            doc_lines.update(range(body[0].lineno, body[0].end_lineno + 1))
    lines: set[int] = set()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type not in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
                            tokenize.ENDMARKER):
            lines.update(range(tok.start[0], tok.end[0] + 1))
    return len(lines - doc_lines)


def test_code_lines_ignores_comments_and_docstrings():
    src = '"""doc\nmore"""\n# c\n\ndef f():\n    """d"""\n    return 1  # x\n'
    assert code_lines(src) == 2


def test_template_source_is_small():
    lines = {p.name: code_lines(p.read_text()) for p in (TEMPLATE / "axle_template").glob("*.py")}
    optional = lines.pop("batch.py")  # batched builds: optional, a file of its own
    total = sum(lines.values())
    # (265: 250 before the eager hot path's launcher, Executable.launcher, and its addresses;
    # 275: its one-output launch without _launch's lists, a third of an eager op's cost;
    # 285: a library's name prefix and the two lines of compile that batch.py needs)
    assert 50 < total < 285, f"the template has {total} lines of code; keep the contract visibly small"
    assert optional < 60, f"batch.py has {optional} lines of code; keep the optional part small"


def test_every_hardware_place_is_marked():
    text = "\n".join(p.read_text() for p in (TEMPLATE / "axle_template").glob("*.py")).lower()
    marks = [line for line in text.splitlines() if "hardware:" in line]
    for place in HARDWARE_PLACES:
        assert any(place in m for m in marks), f"no HARDWARE: comment for {place!r}"


def test_template_capabilities_and_claim_all_flag(monkeypatch):
    from axle.ir.ops import Op

    dev = require_backend("template")
    backend = axle.REGISTRY.backend_for(dev)
    caps = backend.capabilities(dev)
    assert Op.ADD in caps.ops and Op.REDUCE in caps.ops and Op.DOT_GENERAL not in caps.ops
    monkeypatch.setitem(axle.config.backend_flags, "template_claim_all", "true")
    assert Op.DOT_GENERAL in backend.capabilities(dev).ops
    assert type(backend)(claim_all=False).capabilities(dev).ops == caps.ops


def test_template_kernels_are_generated_source():
    dev = require_backend("template")
    f = axle.jit(lambda x, y: (x + y) * y, device=dev)
    x = np.arange(5, dtype=np.float32)
    np.testing.assert_array_equal(f(x, x).numpy(), (x + x) * x)
    sources = f.lower(x, x).compile().executable.kernel_sources()
    text = "\n".join(sources.values())
    # one C loop nest: both ops inlined into the loop over the output
    assert "void k0_loop_fusion_0(" in text and "for (int64_t" in text, text
    assert "+" in text and "*" in text and len(sources) == 1, text


def test_template_executable_rejects_wrong_arguments():
    from axle.compiler import compile_module
    from axle.ir.builder import Builder
    from axle.frontend.device_put import to_buffer

    dev = require_backend("template")
    b = Builder("two")
    x, y = b.parameter("f32[3]"), b.parameter("f32[3]")
    exe = compile_module(b.build(b.add(x, y)), dev)
    with pytest.raises(axle.errors.BackendError, match="1 arguments given, 2 expected"):
        exe.execute([to_buffer(np.ones(3, np.float32), dev)])
    with pytest.raises(axle.errors.BackendError, match="parameter 1 expects f32\\[3\\], got f32\\[4\\]"):
        exe.execute([to_buffer(np.ones(3, np.float32), dev), to_buffer(np.ones(4, np.float32), dev)])


def test_template_launcher_equals_execute_on_strided_bf16_and_empty_buffers() -> None:
    """The eager launcher takes each address from the buffer protocol: a strided handle
    (as a custom call's result can be), bfloat16 (no buffer format) and an empty array
    must take the general path and give what execute gives; a plain one the direct launch."""
    import ml_dtypes

    from axle.backend import Buffer
    from axle.compiler import compile_module
    from axle.ir.builder import Builder
    from axle.ir.dtypes import dtype
    from axle.ir.types import TensorType

    dev = require_backend("template")
    strided = np.arange(12, dtype=np.float32).reshape(3, 4).T  # f32[4, 3], not C-contiguous
    for a in (strided, np.ascontiguousarray(strided), np.ones((2, 3), ml_dtypes.bfloat16),
              np.ones((0, 3), np.float32)):
        t = TensorType(dtype(a.dtype), a.shape)
        b = Builder("eager")
        x, y = b.parameter(t), b.parameter(t)
        exe = compile_module(b.build(b.add(x, y)), dev)
        run = exe.launcher()
        assert run is not None
        (got,) = run([Buffer(dev, t, a), Buffer(dev, t, a)])
        (want,) = exe.execute([Buffer(dev, t, a), Buffer(dev, t, a)])
        assert got.type == want.type == t
        np.testing.assert_array_equal(np.asarray(got.handle, np.float32), np.asarray(a, np.float32) * 2)
        np.testing.assert_array_equal(got.handle, want.handle)


def test_unclaimed_eager_op_launches_on_the_host_step_with_its_copies() -> None:
    """An eager dot on template:0 (which does not claim it) is a partitioned one-op module
    whose host step runs on cpu:0: the hot path launches that step between the copies
    (PartitionedExecutable.launcher), each result a fresh template buffer of the right
    values, also with the inputs changed in between and results kept alive."""
    import axle.numpy as anp
    from axle.frontend import eager
    from axle.partition import PartitionedExecutable

    dev = require_backend("template")
    rng = np.random.default_rng(0)
    hosts = [rng.standard_normal((4, 4)).astype(np.float32) for _ in range(3)]
    arrays = [axle.device_put(h, dev) for h in hosts]
    first = anp.matmul(arrays[0], arrays[1])  # the full path: compiles, fills the hot path
    exe = next(e for e in eager._cache.values() if isinstance(e, PartitionedExecutable))
    assert exe.launcher() is not None and exe.placement().as_dict()
    kept = [anp.matmul(arrays[i], arrays[j]) for i, j in ((0, 1), (1, 2), (2, 2), (0, 1))]
    for out, (i, j) in zip([first, *kept], ((0, 1), (0, 1), (1, 2), (2, 2), (0, 1))):
        assert out.device == dev and out.buffer.device == dev and out.buffer.type == out.aval
        np.testing.assert_allclose(np.asarray(out), hosts[i] @ hosts[j], rtol=1e-5, atol=1e-5)


def test_new_backend_renames_everything(tmp_path):
    out = new_backend("acme_x", tmp_path / "axle-acme_x")
    assert (out / "axle_acme_x" / "backend.py").is_file() and not (out / "axle_template").exists()
    pyproject = (out / "pyproject.toml").read_text()
    assert 'name = "axle-acme_x"' in pyproject
    assert 'acme_x = "axle_acme_x:AcmeXBackend"' in pyproject and 'packages = ["axle_acme_x"]' in pyproject
    code = "\n".join(p.read_text() for p in (out / "axle_acme_x").glob("*.py"))
    assert 'name = "acme_x"' in code and "class AcmeXBackend" in code and "AcmeXExecutable" in code
    leftovers = re.findall(r"axle_template|axle-template|TemplateBackend|TemplateExecutable|template:0|"
                           r"template_claim_all", code + pyproject + (out / "README.md").read_text())
    assert not leftovers
    for p in (out / "axle_acme_x").glob("*.py"):
        ast.parse(p.read_text())
    assert not list(out.rglob("__pycache__")) and not list(out.rglob("*.egg-info"))


def test_new_backend_refuses_bad_names_and_non_empty_folders(tmp_path):
    with pytest.raises(AxleError, match="lowercase"):
        new_backend("Acme", tmp_path / "a")
    with pytest.raises(AxleError, match="lowercase"):
        new_backend("class", tmp_path / "b")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("")
    with pytest.raises(AxleError, match="not empty"):
        new_backend("acme", tmp_path / "full")


def test_cli_new_backend_reports_errors(tmp_path, capsys):
    from axle.cli import main

    assert main(["new-backend", "Bad-Name", str(tmp_path / "x")]) == 2
    assert "must be lowercase" in capsys.readouterr().err
    assert main(["new-backend", "okname", str(tmp_path / "y")]) == 0
    assert "pip install -e" in capsys.readouterr().out


def test_template_dir_is_the_source_tree():
    assert template_dir().resolve() == TEMPLATE.resolve()


def test_new_backend_refuses_an_installed_backends_name(tmp_path, capsys):
    from axle.cli import main
    from axle.registry import installed_names

    assert {"interpreter", "template"} <= set(installed_names())
    for taken in ("interpreter", "template"):
        with pytest.raises(axle.errors.ArgumentError, match=f"'{taken}' is already used by an installed backend "
                                                            f"\\(installed: .*interpreter.*\\)"):
            new_backend(taken, tmp_path / taken)
        assert not (tmp_path / taken).exists()
    assert main(["new-backend", "interpreter", str(tmp_path / "cli")]) == 2
    err = capsys.readouterr().err
    assert "already used by an installed backend" in err and "template" in err


def test_build_and_scaffold_skip_the_same_artefacts():
    """setup.py copies the template into the wheel with the skip list new_backend uses."""
    from axle.scaffold import ARTEFACTS

    tree = ast.parse((ROOT / "setup.py").read_text())
    (value,) = [n.value for n in tree.body if isinstance(n, ast.Assign) and n.targets[0].id == "ARTEFACTS"]
    assert ast.literal_eval(value) == ARTEFACTS


def test_kit_without_pytest_names_the_extra(monkeypatch, capsys):
    """`python -m axle.testing` without pytest: how to install it, not a traceback."""
    from axle.testing.__main__ import main

    monkeypatch.setitem(sys.modules, "pytest", None)  # `import pytest` now raises ImportError
    assert main(["template", "--quick"]) == 2
    assert "pip install 'axle[kit]'" in capsys.readouterr().err


def test_target_passes_run_on_the_device_cluster_only(monkeypatch):
    """What docs/writing-a-backend.md says about Backend.passes(): appended to the core
    pipeline and run on the clusters placed on the device."""
    import axle_template.backend as tb

    import axle.numpy as anp
    from axle.passes.pipeline import FunctionPass

    dev = require_backend("template")
    seen = []

    def record(module):  # noqa: ANN001, ANN202
        seen.append(sorted({n.op.value for c in module.computations() for n in c.nodes}))
        return module

    monkeypatch.setattr(tb.TemplateBackend, "passes", lambda self: [FunctionPass("record", record)])
    f = axle.jit(lambda x, w: anp.exp(x @ w), device=dev)
    x = np.ones((2, 2), np.float32)
    np.testing.assert_allclose(f(x, x).numpy(), np.exp(x @ x), rtol=1e-6)
    assert seen and all("dot" not in ops for ops in seen) and any("exponential" in ops for ops in seen)


def test_claim_all_flag_from_axle_flags():
    import subprocess
    import sys

    code = ("import axle; from axle.ir.ops import Op; d = axle.device('template:0'); "
            "print(Op.DOT_GENERAL in axle.REGISTRY.backend_for(d).capabilities(d).ops)")
    out = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", **flags}).stdout.strip()
           for flags in ({}, {"AXLE_FLAGS": "--template_claim_all"})]
    assert out == ["False", "True"]


def test_kernel_binaries_bounded_by_jit_cache_size(monkeypatch):
    import axle.numpy as anp
    from axle_template import codegen

    dev = require_backend("template")
    monkeypatch.setattr(axle.config, "jit_cache_size", 3)
    monkeypatch.setattr(axle.config, "retrace_warning_threshold", -1)
    f = axle.jit(lambda x: anp.exp(x) + 1.0, device=dev)
    for n in range(1, 20):
        x = np.linspace(0, 1, n, dtype=np.float32)
        np.testing.assert_allclose(np.asarray(f(x)), np.exp(x) + 1.0, rtol=1e-6)
        assert len(codegen._BINARIES) <= 6 and len(f._cache) <= 3


def _mappings() -> int:
    """This process's memory mappings (Linux, where axle's CI runs)."""
    with open("/proc/self/maps") as f:
        return sum(1 for _ in f)


def test_evicted_kernel_binaries_are_unloaded(monkeypatch):
    """A library the cache and every executable let go is unloaded: ctypes never unloads
    on its own, and the mappings of thousands of programs reached vm.max_map_count in a
    fuzz campaign (its worker then died in LLVM's next allocation)."""
    import gc

    from axle.compiler import compile_module
    from axle.ir import Builder, DType, Module
    from axle.ir.types import TensorType
    from axle_template import codegen

    dev = require_backend("template")
    monkeypatch.setattr(axle.config, "jit_cache_size", 2)

    def program(k: int) -> Module:
        b = Builder(f"m{k}")
        x = b.parameter(TensorType(DType.FLOAT32, (k + 1,)))
        return Module(f"m{k}", b.computation(b.exp(x)))

    compile_module(program(0), dev)  # the first build loads what every build shares
    gc.collect()
    before = _mappings()
    for k in range(1, 61):
        exe = compile_module(program(k), dev)
        assert exe.launches[0].stages, "a compiled kernel"
        del exe
    gc.collect()
    assert len(codegen._BINARIES) <= 4
    # 60 libraries of 5-7 mappings each stayed mapped before; now only the cached few
    assert _mappings() - before < 60, _mappings() - before


def test_a_kernel_stage_keeps_its_library_loaded(tmp_path, monkeypatch):
    """Unloading never pulls code from under a stage that can still be called."""
    import gc

    from axle_template import codegen

    from axle.diskcache import DiskCache
    from axle.lru import LRU

    monkeypatch.setattr(codegen, "DISK", DiskCache(str(tmp_path / "cache"), "kernel binary"))
    monkeypatch.setattr(codegen, "_BINARIES", LRU())
    stage = codegen.compile_program("int axle_probe(void) { return 42; }\n").function("axle_probe")
    monkeypatch.setattr(codegen, "_BINARIES", LRU())  # the cache lets go
    gc.collect()
    assert stage() == 42


def test_template_without_a_c_compiler_is_unavailable(monkeypatch):
    import axle_template.backend as tb

    from axle.backend import BackendUnavailable

    monkeypatch.setattr(tb, "COMPILER", ("no-such-cc-for-axle", "-O2"))
    with pytest.raises(BackendUnavailable, match="no-such-cc-for-axle"):
        tb.TemplateBackend()


def test_template_compile_errors_name_the_toolchain_and_source():
    from axle_template.codegen import compile_program

    with pytest.raises(axle.errors.BackendError, match=r"(?s)-std=c99.*failed.*this is not C"):
        compile_program("this is not C;\n")


def test_kernel_binaries_come_back_from_the_disk_cache(tmp_path, monkeypatch):
    """A second process (an empty in-memory cache) loads the binary from disk instead of
    compiling; other compiler flags are another key."""
    from axle_template import codegen

    from axle.diskcache import DiskCache
    from axle.lru import LRU

    def no_compiler(source, tmp):  # noqa: ANN001, ANN202
        raise AssertionError("compiled again")

    monkeypatch.setattr(codegen, "DISK", DiskCache(str(tmp_path / "cache"), "kernel binary"))
    monkeypatch.setattr(codegen, "_BINARIES", LRU())
    source = "int axle_probe(void) { return 42; }\n"
    assert codegen.compile_program(source).function("axle_probe")() == 42
    monkeypatch.setattr(codegen, "_BINARIES", LRU())
    monkeypatch.setattr(codegen, "build", no_compiler)
    assert codegen.compile_program(source).function("axle_probe")() == 42
    monkeypatch.setattr(codegen, "COMPILER", (*codegen.COMPILER, "-O1"))
    with pytest.raises(AssertionError, match="compiled again"):
        codegen.compile_program(source)


def test_kernel_binaries_of_another_machine_are_not_loaded(tmp_path, monkeypatch):
    """A cache directory shared by an x86-64 and an arm64 host (an NFS home): the library
    one built is another key on the other (it would not load there)."""
    import platform

    from axle_template import codegen

    from axle.diskcache import DiskCache
    from axle.lru import LRU

    built = []
    real_build = codegen.build
    monkeypatch.setattr(codegen, "build", lambda source, tmp: built.append(source) or real_build(source, tmp))
    monkeypatch.setattr(codegen, "DISK", DiskCache(str(tmp_path / "cache"), "kernel binary"))
    monkeypatch.setattr(codegen, "_BINARIES", LRU())
    source = "int axle_probe(void) { return 7; }\n"
    assert codegen.compile_program(source).function("axle_probe")() == 7
    monkeypatch.setattr(codegen, "_BINARIES", LRU())
    monkeypatch.setattr(platform, "machine", lambda: "another-isa")
    assert codegen.compile_program(source).function("axle_probe")() == 7
    assert len(built) == 2


# ------------------------------------------------------------------ loops and conditionals


def _template_runs(monkeypatch):
    """The plans the template's executable runs (by result count of each call): the entry's,
    then each loop body's, condition's or branch's."""
    from axle_template.executable import TemplateExecutable

    runs: list = []
    run = TemplateExecutable._run

    def counted(self, plan, launches, args):
        runs.append(plan)
        return run(self, plan, launches, args)

    monkeypatch.setattr(TemplateExecutable, "_run", counted)
    return runs


def _scan_program(xs, h, n):
    import axle.numpy as anp
    from axle import lax

    def step(c, x):
        inner = lax.fori_loop(0, 2, lambda j, v: v * 0.5 + x, c)
        picked = lax.cond(anp.sum(x) > 0, lambda v: v + 1.0, lambda v: v - 1.0, inner)
        return picked, lax.while_loop(lambda s: s[0] < n, lambda s: (s[0] + 1, s[1] * 1.5), (np.int32(0), picked))[1]

    return lax.scan(step, h, xs)


def test_template_runs_loops_and_conditionals_over_its_own_kernels(monkeypatch):
    dev = require_backend("template")
    rng = np.random.default_rng(0)
    xs, h = rng.standard_normal((5, 3)).astype(np.float32), rng.standard_normal(3).astype(np.float32)
    f = axle.jit(_scan_program, device=dev)
    compiled = f.lower(xs, h, np.int32(2)).compile()
    assert not compiled.placement().fallback, compiled.placement()  # no host fallback, default claims
    runs = _template_runs(monkeypatch)
    got_h, got_ys = f(xs, h, np.int32(2))
    c, ys = h, []
    for x in xs:
        c = (c * np.float32(0.5) + x) * np.float32(0.5) + x
        c = c + 1 if x.sum() > 0 else c - 1
        ys.append(c * np.float32(1.5) ** 2)
    np.testing.assert_allclose(got_h.numpy(), c, rtol=1e-5)
    np.testing.assert_allclose(got_ys.numpy(), np.stack(ys), rtol=1e-5)
    # per scan trip: its body, the inner fori_loop's 2 bodies (its condition never runs: the
    # count is known), one branch, the while's 3 conditions and 2 bodies; the scan's own
    # condition never runs either
    assert len(runs) == 1 + len(xs) * (1 + 2 + 1 + 3 + 2), len(runs)


def test_template_loop_with_a_data_dependent_count_tests_its_condition_each_trip(monkeypatch):
    from axle import lax

    dev = require_backend("template")
    f = axle.jit(lambda x, n: lax.while_loop(lambda s: s[0] < n, lambda s: (s[0] + 1, s[1] + s[1]),
                                             (np.int32(0), x))[1], device=dev)
    x = np.arange(4, dtype=np.float32)
    for n in (0, 3):
        f(x, np.int32(n))  # compiled outside the count
        runs = _template_runs(monkeypatch)
        np.testing.assert_array_equal(f(x, np.int32(n)).numpy(), x * 2.0 ** n)
        assert len(runs) == 1 + (n + 1) + n  # the entry, each condition, each body
        monkeypatch.undo()


def test_template_runs_a_loop_with_an_unclaimed_op_inside_whole_on_the_host():
    from axle import lax

    dev = require_backend("template")
    w = np.eye(3, dtype=np.float32) * 0.5
    f = axle.jit(lambda x: lax.fori_loop(0, 3, lambda i, v: v @ w + 1.0, x), device=dev)
    x = np.ones((2, 3), np.float32)
    summary = f.lower(x).compile().placement()
    (host,) = [c for c in summary.clusters if c.fallback]
    assert "while" in host.ops and "while runs op 'dot'" in host.reason, summary
    want = x
    for _ in range(3):
        want = want @ w + 1
    np.testing.assert_allclose(f(x).numpy(), want, rtol=1e-6)


# -------------------------------------------------------------------------- batched builds


def _unary_programs(ops, sizes):  # noqa: ANN001, ANN202
    """One small module per (op, size): an op on a float32 vector of that size."""
    from axle.ir import Builder, DType, Module
    from axle.ir.types import TensorType

    out = []
    for op in ops:
        for n in sizes:
            b = Builder(f"{op.value}{n}")
            x = b.parameter(TensorType(DType.FLOAT32, (n,)))
            out.append(Module(f"{op.value}{n}", b.computation(b.op(op, x))))
    return out


@pytest.fixture
def counted_builds(tmp_path, monkeypatch):  # noqa: ANN001, ANN201
    """Empty template caches (memory and a disk cache of the test's own); the sources the
    toolchain was called on, in order."""
    from axle_template import codegen

    from axle.diskcache import DiskCache
    from axle.lru import LRU

    built: list[str] = []
    real_build = codegen.build
    monkeypatch.setattr(codegen, "build", lambda source, tmp: built.append(source) or real_build(source, tmp))
    monkeypatch.setattr(codegen, "DISK", DiskCache(str(tmp_path / "cache"), "kernel binary"))
    monkeypatch.setattr(codegen, "_BINARIES", LRU())
    return built


def test_batched_builds_build_many_modules_with_one_toolchain_call(counted_builds, monkeypatch):
    """Modules compiled inside batched_builds are built by one cc call on leaving it; each
    module's own compile afterwards finds its program built (memory, then disk: another
    process) and computes what it computes unbatched."""
    from axle_template import codegen

    from axle.compiler import compile_module
    from axle.ir.ops import Op
    from axle.lru import LRU
    from axle.testing.prebuild import prebuild

    dev = require_backend("template")
    modules = _unary_programs((Op.EXP, Op.LOG, Op.NEG, Op.SQRT), (3, 5, 8))
    prebuild(((m, optimize) for m in modules for optimize in (True, False)), dev)
    assert len(counted_builds) == 1, "one toolchain call for the whole batch"
    x = np.linspace(0.5, 2.0, 8, dtype=np.float32)
    expected = {Op.EXP: np.exp, Op.LOG: np.log, Op.NEG: np.negative, Op.SQRT: np.sqrt}
    for cache in ("memory", "disk"):
        if cache == "disk":  # another process: an empty in-memory cache
            monkeypatch.setattr(codegen, "_BINARIES", LRU())
        for m in modules:
            op = m.entry.nodes[-1].op
            arg = x[:m.entry.parameter_types[0].shape[0]]
            for optimize in (True, False):
                exe = compile_module(m, dev, optimize=optimize)
                (out,) = exe.execute([axle.REGISTRY.backend_for(dev).to_device(arg, dev)])
                np.testing.assert_allclose(out.handle, expected[op](arg), rtol=1e-6)
        assert len(counted_builds) == 1, f"built again after the batch ({cache})"
    # a second batch of the same modules builds nothing
    prebuild(((m, True) for m in modules), dev)
    assert len(counted_builds) == 1


def test_an_executable_compiled_in_a_batch_does_not_run(counted_builds):
    from axle.ir.ops import Op

    dev = require_backend("template")
    backend = axle.REGISTRY.backend_for(dev)
    (module,) = _unary_programs((Op.EXP,), (4,))
    with backend.batched_builds(dev):
        exe = axle.compiler.compile_module(module, dev)
    with pytest.raises(axle.errors.BackendError, match="batched_builds"):
        exe.execute([backend.to_device(np.ones(4, np.float32), dev)])


def test_a_module_failing_to_build_does_not_poison_its_batch(counted_builds, monkeypatch):
    """A batch whose program fails to build caches nothing: every module builds alone, the
    good ones run, and the bad one's own compile reports the toolchain's error."""
    from axle.compiler import compile_module
    from axle.ir.ops import Op
    from axle.lowering import c as crender
    from axle.testing.cases import strict_placement
    from axle.testing.prebuild import prebuild

    dev = require_backend("template")
    monkeypatch.setitem(crender.FLOAT_UNARY, Op.LOG, lambda d, dt, x: f"broken_log_for_the_test({x}")
    good, bad = _unary_programs((Op.EXP, Op.LOG), (4,))
    prebuild([(good, True), (bad, True)], dev)
    assert len(counted_builds) == 1 and "broken_log_for_the_test" in counted_builds[0]
    x = np.linspace(0.5, 2.0, 4, dtype=np.float32)
    exe = compile_module(good, dev)
    (out,) = exe.execute([axle.REGISTRY.backend_for(dev).to_device(x, dev)])
    np.testing.assert_allclose(out.handle, np.exp(x), rtol=1e-6)
    with strict_placement(), pytest.raises(AxleError, match=r"(?s)cc.*failed.*broken_log_for_the_test"):
        compile_module(bad, dev)  # (strict: no fallback to the host)
    assert len(counted_builds) == 3  # the batch, then each module alone
