"""``axle explain FILE.py:fn --arg f32[100,784] --arg f32[784,10] [--device cpu:0]
[--html report.html] [--dot graph.svg] [--no-source]``.

Each ``--arg`` is an array type (``f32[100,784]``, ``s32[]``; numpy spellings such as
``float32[3]`` or ``i64[2]`` work too), a Python literal (``0.5``, ``3``) passed as is
(a weak scalar, or the value of a static argument of an ``axle.jit(..., static_argnums=)``
function), or a pytree of both (``"{'W': f32[784,10], 'b': f32[10]}"``, ``"(f32[3], 2)"``).
No data is allocated: arrays are zero-strided views.
"""
from __future__ import annotations

import argparse
import ast
import importlib
import importlib.util
import os
import re
import sys
from typing import Any

import numpy as np

from .errors import AxleError
from .frontend.jit import JitFunction, jit
from .ir.dot import render
from .ir.parser import parse_type

_ALIASES = {"bool": "pred", "i32": "s32", "i64": "s64", "int32": "s32", "int64": "s64", "float16": "f16",
            "float32": "f32", "float64": "f64", "half": "f16", "float": "f32", "double": "f64"}
_TYPE_RE = re.compile(r"^\s*([A-Za-z0-9_]+)\s*\[\s*([0-9,\s]*)\]\s*$")
#: an array type inside a larger literal: a name directly followed by [dims]
_INNER_TYPE_RE = re.compile(r"(?<![\w'\"])([A-Za-z][A-Za-z0-9_]*)\[([0-9,\s]*)\]")


_MARK = "__axle_explain_arg_"


def _placeholder(text: str, dt_name: str, dims: str) -> np.ndarray:
    dt = _ALIASES.get(dt_name, dt_name)
    try:
        t = parse_type(f"{dt}[{dims}]")
    except AxleError as e:
        raise AxleError(f"--arg {text!r}: {e.message} (element types: pred, s32, s64, f16, f32, f64)") from None
    return np.broadcast_to(np.zeros((), t.dtype.np), t.shape)


def parse_arg(text: str) -> Any:
    """An argument placeholder from ``f32[100,784]`` (a zero-strided array of that type,
    so no memory is used), a Python literal, or a pytree literal holding array types."""
    m = _TYPE_RE.match(text)
    if m:
        return _placeholder(text, m.group(1), m.group(2))
    arrays: list[np.ndarray] = []

    def stash(tm: re.Match[str]) -> str:
        arrays.append(_placeholder(text, tm.group(1), tm.group(2)))
        return f"'{_MARK}{len(arrays) - 1}'"

    try:
        value = ast.literal_eval(_INNER_TYPE_RE.sub(stash, text))
    except (ValueError, SyntaxError):
        raise AxleError(f"--arg {text!r} is neither an array type like f32[100,784], a Python literal, "
                        f"nor a tuple/list/dict of them") from None

    def fill(v: Any) -> Any:
        if isinstance(v, str) and v.startswith(_MARK):
            return arrays[int(v[len(_MARK):])]
        if isinstance(v, (list, tuple)):
            return type(v)(fill(x) for x in v)
        if isinstance(v, dict):
            return {k: fill(x) for k, x in v.items()}
        return v

    return fill(value)


def load_function(target: str) -> Any:
    """``path/to/file.py:fn`` or ``package.module:fn`` -> the object named fn."""
    where, sep, name = target.rpartition(":")
    if not sep or not where or not name:
        raise AxleError(f"explain target {target!r} must look like FILE.py:function or module:function")
    if where.endswith(".py") or os.path.sep in where:
        if not os.path.exists(where):
            raise AxleError(f"explain: no file {where!r}")
        folder = os.path.dirname(os.path.abspath(where))
        if folder not in sys.path:
            sys.path.insert(0, folder)  # so the file's own sibling imports work
        mod_name = "_axle_explain_" + re.sub(r"\W", "_", os.path.splitext(os.path.basename(where))[0])
        spec = importlib.util.spec_from_file_location(mod_name, where)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[mod_name] = module
        spec.loader.exec_module(module)
    else:
        if os.getcwd() not in sys.path:
            sys.path.insert(0, os.getcwd())  # like `python -m`: modules of the current folder
        try:
            module = importlib.import_module(where)
        except ImportError as e:
            raise AxleError(f"explain: cannot import {where!r}: {e}") from None
    obj = module
    for part in name.split("."):
        if not hasattr(obj, part):
            available = sorted(k for k, v in vars(module).items() if callable(v) and not k.startswith("_"))
            raise AxleError(f"explain: {where} has no {name!r}; functions there: {', '.join(available)}")
        obj = getattr(obj, part)
    return obj


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("target", help="FILE.py:function, package.module:function or MODEL.onnx")
    p.add_argument("--arg", action="append", default=[], metavar="TYPE",
                   help="one per positional argument, e.g. f32[100,784] (or a literal such as 0.5)")
    p.add_argument("--device", default=None, help="device to compile for (default: the default device)")
    p.add_argument("--html", default=None, metavar="OUT.html", help="also write the HTML report with pictures")
    p.add_argument("--dot", default=None, metavar="OUT.{dot,svg,png}",
                   help="also write a picture of the optimized module")
    p.add_argument("--no-source", action="store_true", help="leave out the generated kernel code")


def _lower_onnx(path: str, device: str | None) -> Any:
    try:
        from .onnx.run import lower_model  # the onnx extra, only for an ONNX model
    except ImportError as e:
        raise AxleError(f"explain: an ONNX model needs the onnx package (pip install 'axle[onnx]'): {e}") from None
    return lower_model(path, device)


def run_explain(args: argparse.Namespace) -> int:
    try:
        if args.target.endswith(".onnx"):
            lowered = _lower_onnx(args.target, args.device)
        else:
            fn = load_function(args.target)
            call_args = [parse_arg(a) for a in args.arg]
            if isinstance(fn, JitFunction):
                jf = fn if args.device is None else jit(fn.fn, device=args.device, static_argnums=fn.static_argnums)
            elif callable(fn):
                jf = jit(fn, device=args.device)
            else:
                raise AxleError(f"explain: {args.target} is a {type(fn).__name__}, not a function")
            lowered = jf.lower(*call_args)
        expl = lowered.explain(source=not args.no_source)
    except AxleError as e:
        print(f"axle explain: {e}", file=sys.stderr)
        return 2
    print(expl.text(source=not args.no_source), end="")
    if args.html:
        with open(args.html, "w") as f:
            f.write(expl.to_html())
        print(f"wrote {args.html}")
    if args.dot:
        text = expl.dot()
        if args.dot.endswith((".dot", ".gv")):
            with open(args.dot, "w") as f:
                f.write(text)
        else:
            with open(args.dot, "wb") as f:
                f.write(render(text, args.dot.rsplit(".", 1)[-1]))
        print(f"wrote {args.dot}")
    return 0
