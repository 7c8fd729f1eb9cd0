"""``axle aot FILE.py:fn --arg f32[100,784] ... -o DIR``: the command-line face of
axle_cpu.aot (registered in the ``axle.commands`` entry-point group)."""
from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from collections.abc import Callable
from typing import Any

HELP = "compile a Python function ahead of time to an object file + C header"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("target", help="FILE.py:function (or module.path:function)")
    p.add_argument("--arg", action="append", default=[], metavar="TYPE",
                   help="one per parameter, in order, e.g. f32[100,784]")
    p.add_argument("-o", "--output", required=True, help="output folder")
    p.add_argument("--name", help="C name prefix (default: the function's name)")
    p.add_argument("--cpu", help="target CPU (default: this host; 'generic' for portable x86-64)")
    p.add_argument("--no-optimize", action="store_true", help="skip the optimizer pipeline")


def load_function(target: str) -> Callable[..., Any]:
    from axle.errors import AxleError

    path, sep, fn_name = target.rpartition(":")
    if not sep or not path or not fn_name:
        raise AxleError(f"aot: expected FILE.py:function, got {target!r}")
    if path.endswith(".py") or os.sep in path:
        if not os.path.exists(path):
            raise AxleError(f"aot: no such file {path!r}")
        spec = importlib.util.spec_from_file_location(f"axle_aot_{abs(hash(path))}", path)
        assert spec is not None and spec.loader is not None, path  # a .py file that exists
        mod = importlib.util.module_from_spec(spec)
        sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
        try:
            spec.loader.exec_module(mod)
        finally:
            sys.path.pop(0)
    else:
        mod = importlib.import_module(path)
    fn = getattr(mod, fn_name, None)
    if not callable(fn):
        raise AxleError(f"aot: {path} has no function {fn_name!r}")
    return fn


def run(args: argparse.Namespace) -> int:
    from axle.errors import AxleError

    from .aot import compile_aot

    try:
        fn = load_function(args.target)
        res = compile_aot(fn, args.arg, args.output, name=args.name, cpu=args.cpu,
                          optimize=not args.no_optimize, source=args.target)
    except AxleError as e:
        print(f"axle aot: error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {res.object_path} ({res.object_bytes} bytes), {res.header_path}, {res.readme_path}")
    print(f"entry point: int {res.name}_run(...)  [{', '.join(map(str, res.arg_types))}] -> "
          f"[{', '.join(map(str, res.result_types))}]")
    return 0
