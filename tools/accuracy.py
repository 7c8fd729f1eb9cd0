"""Measures the max error in ulps of every math function (the transcendental primitives of
the op table, sqrt and rsqrt) per float dtype and device, over random inputs from every
binade of the dtype's finite range, against the interpreter's NumPy reference evaluated in
float64, and prints a Markdown table (the one in docs/reliability.md). The measurement
itself is ``axle.testing.accuracy``.

    .venv/bin/python tools/accuracy.py                      # every device but the interpreter
    .venv/bin/python tools/accuracy.py --per-binade 8 --devices cpu:0 --functions sin,cos
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import axle
from axle.ir import DType
from axle.testing import accuracy

_DTYPES = {"float16": DType.FLOAT16, "float32": DType.FLOAT32, "float64": DType.FLOAT64}


def machine_line() -> str:
    """The benchmarks' machine line, the LLVM host CPU and the OpenCL platform."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    from common import machine

    parts = [machine()]
    try:
        import llvmlite.binding as llvm

        parts.append(f"LLVM host CPU {llvm.get_host_cpu_name()}")
    except ImportError:
        pass
    try:
        import pyopencl as cl

        parts.append(" ".join(cl.get_platforms()[0].version.split()[:4]))  # e.g. OpenCL 3.0 PoCL 3.1
    except Exception:  # noqa: BLE001 - no OpenCL here
        pass
    return ", ".join(parts)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--per-binade", type=int, default=64, help="random inputs per binade (default 64)")
    ap.add_argument("--devices", help="comma-separated devices (default: all but interpreter:0)")
    ap.add_argument("--dtypes", default="float16,float32,float64")
    ap.add_argument("--functions", help="comma-separated op names (default: all, see axle.testing.accuracy)")
    ap.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    args = ap.parse_args(argv)
    if args.devices:
        devices = [axle.REGISTRY.device(d) for d in args.devices.split(",")]
    else:
        devices = [d for d in axle.devices() if d.backend != "interpreter"]
    ops = accuracy.functions()
    if args.functions:
        names = {**{op.value: op for op in ops}, **{op.name.lower(): op for op in ops}}
        unknown = [n for n in args.functions.split(",") if n not in names]
        if unknown:
            ap.error(f"unknown function(s) {', '.join(unknown)}; choose from {', '.join(sorted(names))}")
        ops = [names[n] for n in args.functions.split(",")]
    dtypes = [_DTYPES[d] for d in args.dtypes.split(",")]
    progress = None if args.quiet else (lambda s: print(s, file=sys.stderr, flush=True))
    md, _ = accuracy.table(devices, ops, dtypes, args.per_binade, progress)
    print(f"Measured on: {machine_line()}; {args.per_binade} random inputs per binade.\n")
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
