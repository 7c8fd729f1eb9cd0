"""The core's layers import only downward (axle/layers.py): read with ``ast``, nothing is
imported, so a cycle or an upward import is named by file and line instead of surfacing
as an ImportError that depends on import order."""
from __future__ import annotations

import ast
import importlib.util
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

CORE = Path(__file__).resolve().parents[2] / "core"


def _load_layers():  # noqa: ANN202 - the module object
    """axle/layers.py alone, without importing the axle package it describes."""
    spec = importlib.util.spec_from_file_location("_axle_layers", CORE / "axle" / "layers.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


layers = _load_layers()


def _modules() -> dict[str, tuple[Path, bool]]:
    """Dotted name -> (file, is a package __init__) for every module of core/axle."""
    out = {}
    for path in sorted((CORE / "axle").rglob("*.py")):
        parts = list(path.relative_to(CORE).with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        out[".".join(parts[:-1] if is_pkg else parts)] = (path, is_pkg)
    return out


MODULES = _modules()


@dataclass(frozen=True)
class Import:
    source: str  # the importing module
    target: str  # the imported module (absolute; for `from m import name`, m.name when that is a module)
    where: str  # file:line
    in_function: bool
    type_checking: bool  # under `if TYPE_CHECKING:`: never runs

    @property
    def internal(self) -> bool:
        return self.target == "axle" or self.target.startswith("axle.")


def _targets(module: str, is_pkg: bool, node: ast.Import | ast.ImportFrom) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if node.level:
        base = module.split(".")[: len(module.split(".")) - node.level + (1 if is_pkg else 0)]
        prefix = ".".join(base + ([node.module] if node.module else []))
    else:
        prefix = node.module or ""
    # `from pkg import sub` imports the submodule pkg.sub; `from mod import name`, mod
    return [f"{prefix}.{a.name}" if f"{prefix}.{a.name}" in MODULES else prefix for a in node.names]


def _literal_import_module(node: ast.AST) -> str | None:
    """The name in ``importlib.import_module("axle.x")``: an import all the same."""
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "import_module"
            and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)
            and not node.args[0].value.startswith(".")):
        return node.args[0].value
    return None


def _imports(module: str) -> Iterator[Import]:
    path, is_pkg = MODULES[module]
    tree = ast.parse(path.read_text(), str(path))
    rel = path.relative_to(CORE.parent)

    def walk(node: ast.AST, in_function: bool, type_checking: bool) -> Iterator[Import]:
        for child in ast.iter_child_nodes(node):
            fn = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            tc = type_checking or (isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test))
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                for t in _targets(module, is_pkg, child):
                    yield Import(module, t, f"{rel}:{child.lineno}", in_function, type_checking)
            dynamic = _literal_import_module(child)
            if dynamic is not None:
                yield Import(module, dynamic, f"{rel}:{child.lineno}", in_function, type_checking)
            yield from walk(child, fn, tc)

    yield from walk(tree, False, False)


IMPORTS = [imp for m in MODULES for imp in _imports(m)]


def _owner(target: str) -> str | None:
    """The core module an import of ``target`` loads (its longest module prefix)."""
    parts = target.split(".")
    while parts:
        if ".".join(parts) in MODULES:
            return ".".join(parts)
        parts.pop()
    return None


def test_every_module_has_a_layer() -> None:
    missing = sorted(m for m in MODULES if layers.layer_of(m) is None)
    assert not missing, f"modules missing from axle/layers.py LAYERS: {missing}"


def test_imports_only_go_down() -> None:
    upward = []
    for imp in IMPORTS:
        owner = _owner(imp.target) if imp.internal else None
        if owner is None or None in (layers.layer_of(imp.source), layers.layer_of(owner)):
            continue  # a module without a layer fails test_every_module_has_a_layer
        (src_rank, src), (dst_rank, dst) = layers.layer_of(imp.source), layers.layer_of(owner)
        if dst_rank > src_rank:
            upward.append(f"{imp.where}: {imp.source} ({src}) imports {owner} ({dst})")
    assert not upward, "imports of a higher layer (see axle/layers.py):\n" + "\n".join(upward)


def _allowed() -> dict[tuple[str, str], str]:
    return {(m, t): why for m, t, why in layers.LAZY_IMPORTS}


def test_no_import_hides_in_a_function() -> None:
    allowed = _allowed()
    hidden = [f"{imp.where}: {imp.source} imports {imp.target} inside a function"
              for imp in IMPORTS if imp.in_function and (imp.source, imp.target) not in allowed]
    assert not hidden, ("function-level imports not in axle/layers.py LAZY_IMPORTS (move them to the top of "
                        "the module, or move the code to the right layer):\n" + "\n".join(hidden))


def test_lazy_imports_are_explained_and_used() -> None:
    used = {(imp.source, imp.target) for imp in IMPORTS if imp.in_function}
    for module, target, why in layers.LAZY_IMPORTS:
        assert module in MODULES, f"LAZY_IMPORTS names {module}, which is not a core module"
        assert why.strip(), f"LAZY_IMPORTS entry ({module}, {target}) gives no reason"
        assert (module, target) in used, f"LAZY_IMPORTS entry ({module}, {target}) is stale: no such import"


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            w = next(children, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(edges[w]))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    x = stack.pop()
                    on_stack.discard(x)
                    comp.append(x)
                    if x == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def test_no_import_cycle() -> None:
    """Module-level imports that run (not under TYPE_CHECKING) form no cycle. The implicit
    import of a package's ``__init__`` by its submodules is not an edge: a package
    ``__init__`` only re-exports."""
    edges: dict[str, set[str]] = {m: set() for m in MODULES}
    for imp in IMPORTS:
        owner = _owner(imp.target) if imp.internal else None
        if owner is not None and owner != imp.source and not imp.in_function and not imp.type_checking:
            edges[imp.source].add(owner)
    cycles = _cycles(edges)
    assert not cycles, "import cycles among core modules:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_the_checks_see_a_violation() -> None:
    """The walker resolves relative imports and finds function-level ones: a planted upward
    import from the IR is reported with its line."""
    tree = ast.parse("def f():\n    from ..placement import resolve\n")
    imp = tree.body[0].body[0]  # type: ignore[attr-defined]
    assert _targets("axle.ir.module", False, imp) == ["axle.placement"]
    assert layers.layer_of("axle.ir.module")[0] < layers.layer_of("axle.placement")[0]
    assert _cycles({"a": {"b"}, "b": {"a"}, "c": set()}) == [["a", "b"]]


def test_what_upper_layers_attach() -> None:
    """The turned-around calls still work after ``import axle``: array operators and methods
    are axle.numpy's functions, ``with device:`` sets the default device, and a lowered
    function explains itself."""
    import numpy as np

    import axle
    import axle.numpy as anp
    from axle.numpy import _array_methods

    for table, names in ((_array_methods.BINARY, {"add": "add", "sub": "subtract", "matmul": "matmul"}),
                         (_array_methods.COMPARE, {"lt": "less", "eq": "equal"}),
                         (_array_methods.UNARY, {"neg": "negative", "abs": "abs"})):
        for short, name in names.items():
            assert table[short] is getattr(anp, name)
    x = anp.asarray(np.arange(6, dtype=np.float32).reshape(2, 3))
    np.testing.assert_array_equal(np.asarray(2 - x.T), 2 - np.arange(6, dtype=np.float32).reshape(2, 3).T)
    assert float(x.sum()) == 15.0 and x.reshape(3, 2).shape == (3, 2)
    with axle.device("interpreter:0") as dev:
        assert axle.default_device() == dev
    assert "optimized module" in axle.jit(lambda a: a * 2).lower(x).explain(source=False).text()


def _type_checking_defs(path: Path, cls: str) -> set[str]:
    """Names a class declares under ``if TYPE_CHECKING:`` (for type checkers only)."""
    tree = ast.parse(path.read_text())
    body = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls).body
    blocks = [n for n in body if isinstance(n, ast.If) and "TYPE_CHECKING" in ast.unparse(n.test)]
    return {d.name for b in blocks for d in b.body if isinstance(d, ast.FunctionDef)}


def test_attached_names_are_declared_for_type_checkers() -> None:
    """What upper layers attach is declared in the class under ``if TYPE_CHECKING:`` (mypy
    cannot see a setattr), name for name, so neither list drifts from the other."""
    from axle.numpy import _array_methods as am

    attached = ({f"__{n}__" for n in am.BINARY} | {f"__r{n}__" for n in am.BINARY}
                | {f"__{n}__" for n in (*am.COMPARE, *am.UNARY)} | set(am.METHODS) | set(am.PROPERTIES))
    declared = _type_checking_defs(CORE / "axle" / "frontend" / "arrayops.py", "ArrayOps") - {"shape"}
    assert declared == attached, (sorted(declared - attached), sorted(attached - declared))
    assert _type_checking_defs(CORE / "axle" / "backend.py", "Device") == {"__enter__", "__exit__"}
    assert _type_checking_defs(CORE / "axle" / "frontend" / "jit.py", "Lowered") == {"explain"}
