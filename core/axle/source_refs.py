"""Code by reference: where a function, class, module-level value or table entry is written,
with its source text, for ``axle explain-op`` (axle.explain_op).

Paths are given relative to the folder holding the top-level package (``axle/ir/ops.py``,
``axle_cpu/emitter.py``), so the output is the same on every machine. A table entry is
found in the module's syntax tree: the ``Op.TANH: ...`` item of a dict literal, and the
top-level ``for`` loops that (re)assign ``TABLE[op]``.
"""
from __future__ import annotations

import ast
import enum
import functools
import importlib
import inspect
import sys
import textwrap
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeGuard

import numpy as np

#: longest excerpt shown; the rest is counted ("... 12 more lines")
MAX_LINES = 40


@dataclass(frozen=True)
class Excerpt:
    """A located piece of source: ``path`` relative to its package root, 1-based ``line``."""

    path: str
    line: int
    text: str

    def where(self, lines: bool = True) -> str:
        return f"{self.path}:{self.line}" if lines else self.path


def relative_path(module: types.ModuleType) -> str:
    """The module's file relative to the folder that holds its top-level package."""
    file = inspect.getsourcefile(module) or module.__file__ or module.__name__
    top = sys.modules[module.__name__.partition(".")[0]]
    root = Path(inspect.getsourcefile(top) or top.__file__ or file).resolve().parent.parent
    try:
        return Path(file).resolve().relative_to(root).as_posix()
    except ValueError:  # not under its package root (a generated or zipped module)
        return Path(file).name


def _clip(text: str) -> str:
    lines = textwrap.dedent(text).rstrip("\n").splitlines()
    if len(lines) <= MAX_LINES:
        return "\n".join(lines)
    return "\n".join(lines[:MAX_LINES] + [f"... ({len(lines) - MAX_LINES} more lines)"])


def unwrap(obj: Any) -> Any:
    """``obj`` without decorators that set ``__wrapped__`` (and a bound method's function)."""
    obj = inspect.unwrap(obj) if callable(obj) else obj
    return getattr(obj, "__func__", obj)


def excerpt(obj: Any) -> Excerpt | None:
    """The source of a function, method or class (None for builtins and C functions)."""
    obj = unwrap(obj)
    try:
        lines, start = inspect.getsourcelines(obj)
        module = inspect.getmodule(obj)
    except (OSError, TypeError):
        return None
    if module is None:
        return None
    return Excerpt(relative_path(module), max(start, 1), _clip("".join(lines)))


def is_named(fn: Any) -> bool:
    """A function or class defined at a module's top level or in a class (not a lambda, not
    a closure): its name says what it is."""
    fn = unwrap(fn)
    qual = getattr(fn, "__qualname__", "")
    return (inspect.isfunction(fn) or inspect.isclass(fn)) and "<" not in qual


def factory(fn: Any) -> Any | None:
    """The top-level function that made closure ``fn`` (``_ew`` for ``_ew.<locals>.rule``)."""
    qual = getattr(fn, "__qualname__", "")
    if ".<locals>" not in qual:
        return None
    owner = qual.split(".<locals>")[0]
    made_by = getattr(inspect.getmodule(fn), owner, None) if "." not in owner else None
    return made_by if inspect.isfunction(made_by) else None


def behind(value: Any, depth: int = 4) -> list[Any]:
    """The named functions a table value runs: itself when named; for a closure, the function
    that made it and, recursively, the named functions among its captured values
    (``_float_fn(M.tanh)`` -> ``_ew``, ``_float_fn``, ``mathfns.tanh``)."""
    out: list[Any] = []

    def visit(v: Any, d: int) -> None:
        v = unwrap(v)
        if d < 0 or not callable(v) or any(v is o for o in out):
            return
        if is_named(v):
            out.append(v)
            return
        made_by = factory(v)
        if made_by is not None and not any(made_by is o for o in out):
            out.append(made_by)
        for cell in getattr(v, "__closure__", None) or ():
            try:
                visit(cell.cell_contents, d - 1)
            except ValueError:  # an empty cell
                continue
        defaults = getattr(v, "__defaults__", None) or ()
        for default in (*defaults, *(getattr(v, "__kwdefaults__", None) or {}).values()):
            visit(default, d - 1)  # a lambda binding its loop's function: lambda x, _f=_f: ...

    visit(value, depth)
    return out


def captured(fn: Any) -> dict[str, str]:
    """What a closure captured and a lambda's defaults, described by name: what a generic
    rule such as the reference ``_float_unary(np.tanh)`` applies (``f = numpy.tanh``)."""
    fn = unwrap(fn)
    code = getattr(fn, "__code__", None)
    out: dict[str, str] = {}
    if code is None or is_named(fn):  # a named function's defaults are its signature's
        return out
    for name, cell in zip(code.co_freevars, getattr(fn, "__closure__", None) or ()):
        try:
            out[name] = describe(cell.cell_contents)
        except ValueError:
            continue
    for name, value in (getattr(fn, "__kwdefaults__", None) or {}).items():
        out[name] = describe(value)
    defaults = getattr(fn, "__defaults__", None) or ()
    names = code.co_varnames[code.co_argcount - len(defaults):code.co_argcount]
    out.update({n: describe(v) for n, v in zip(names, defaults)})
    return out


def describe(value: Any) -> str:
    """A short, machine-independent name for a captured value."""
    if isinstance(value, np.ufunc):
        return f"numpy.{value.__name__}"
    if inspect.isfunction(value) and value.__name__ == "<lambda>":
        module = inspect.getmodule(value)
        return f"a lambda in {relative_path(module)}" if module is not None else "a lambda"
    if callable(value) and hasattr(value, "__qualname__"):
        mod = getattr(value, "__module__", None) or ""
        return f"{mod}.{value.__qualname__}" if mod else value.__qualname__
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


# ------------------------------------------------------------------ module-level values


@functools.lru_cache(maxsize=64)
def _module_tree(module: types.ModuleType) -> tuple[ast.Module, list[str]]:
    source = inspect.getsource(module)
    return ast.parse(source), source.splitlines()


def _assigns(stmt: ast.stmt, name: str) -> TypeGuard[ast.Assign | ast.AnnAssign]:
    targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target] if isinstance(stmt, ast.AnnAssign) else []
    return any(isinstance(t, ast.Name) and t.id == name for t in targets)


def _lines(src: list[str], node: ast.stmt) -> str:
    return "\n".join(src[node.lineno - 1:node.end_lineno])


def _scope(tree: ast.Module, qual: str) -> tuple[list[ast.stmt], str]:
    """The statements that may assign ``qual``'s last name: the module's, or for
    ``"Class.attr"`` the class body's."""
    *owners, name = qual.split(".")
    body: list[ast.stmt] = tree.body
    for owner in owners:
        cls = next((s for s in body if isinstance(s, ast.ClassDef) and s.name == owner), None)
        body = cls.body if cls is not None else []
    return body, name


def assignment(module: types.ModuleType, qual: str) -> Excerpt | None:
    """The statement assigning ``qual`` in ``module`` (a table, a constant; ``"Class.attr"``
    for a class attribute)."""
    tree, src = _module_tree(module)
    body, name = _scope(tree, qual)
    for stmt in body:
        if _assigns(stmt, name):
            return Excerpt(relative_path(module), stmt.lineno, _clip(_lines(src, stmt)))
    return None


def _key_matches(node: ast.AST | None, key: object) -> bool:
    if isinstance(key, enum.Enum):
        return isinstance(node, ast.Attribute) and node.attr == key.name
    return isinstance(node, ast.Constant) and node.value == key


def _mentions(node: ast.AST, key: object) -> bool:
    return any(_key_matches(n, key) for n in ast.walk(node))


def _sets_item(stmt: ast.stmt, table: str) -> bool:
    return any(isinstance(n, ast.Subscript) and isinstance(n.value, ast.Name) and n.value.id == table
               and isinstance(n.ctx, ast.Store) for n in ast.walk(stmt))


def table_entry(module: types.ModuleType, qual: str, key: object) -> list[Excerpt]:
    """Where ``table[key]`` is written in ``module`` (``qual``: the table's name, or
    ``"Class.attr"``): its item in the table's dict literal and the statements beside it that
    assign ``table[...]`` naming ``key`` (a wrapping loop); the whole table statement when
    the item comes from an expression (a comprehension)."""
    tree, src = _module_tree(module)
    path = relative_path(module)
    body, table = _scope(tree, qual)
    found: list[Excerpt] = []
    whole: Excerpt | None = None
    for stmt in body:
        if _assigns(stmt, table):
            value = stmt.value
            whole = Excerpt(path, stmt.lineno, _clip(_lines(src, stmt)))
            if isinstance(value, ast.Dict):
                for k, v in zip(value.keys, value.values):
                    if k is not None and _key_matches(k, key):  # None: a ``**mapping`` entry
                        text = "\n".join(src[k.lineno - 1:v.end_lineno])
                        found.append(Excerpt(path, k.lineno, _clip(text)))
        elif isinstance(stmt, (ast.For, ast.Assign)) and _sets_item(stmt, table) and _mentions(stmt, key):
            found.append(Excerpt(path, stmt.lineno, _clip(_lines(src, stmt))))
    if not found and whole is not None:
        return [whole]
    return found


def statements_calling(module: types.ModuleType, fn_name: str, key: object) -> list[Excerpt]:
    """The top-level statements of ``module`` that call ``fn_name`` and name ``key``: an
    op's row in a table built by calls (``_def(Op.TANH, ...)``, or a loop of them)."""
    tree, src = _module_tree(module)
    found = []
    for stmt in tree.body:
        calls = any(isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == fn_name
                    for n in ast.walk(stmt))
        if calls and _mentions(stmt, key):
            found.append(Excerpt(relative_path(module), stmt.lineno, _clip(_lines(src, stmt))))
    return found


# ---------------------------------------------------------------------- by reference


def resolve(where: str, package: str | None = None) -> tuple[types.ModuleType, Any, str]:
    """``"pkg.module:Name.attr"`` (or ``".module:Name"`` relative to ``package``) -> the
    module, the object and its qualified name in the module (``Name.attr``). Raises
    ImportError or AttributeError."""
    mod_name, _, qual = where.partition(":")
    module = (importlib.import_module(mod_name, package) if mod_name.startswith(".")
              else importlib.import_module(mod_name))
    obj: Any = module
    for part in qual.split(".") if qual else ():
        obj = getattr(obj, part)
    return module, obj, qual


def located(obj: Any, module: types.ModuleType | None = None, qual: str = "") -> Excerpt | None:
    """Source of a function or class; of a value assigned in a module or class body (a
    table, a constant) when its ``module`` and qualified name are given."""
    ex = excerpt(obj) if (inspect.isfunction(unwrap(obj)) or inspect.isclass(obj) or inspect.ismethod(obj)) else None
    if ex is None and module is not None and qual:
        ex = assignment(module, qual)
    return ex

