"""The ``axle`` command."""
from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from importlib.metadata import entry_points

from . import profiler
from .doctor import TIMEOUT_S
from .doctor import main as doctor_main
from .errors import AxleError
from .explain_cli import add_arguments, run_explain
from .explain_op import main as explain_op_main
from .registry import REGISTRY
from .scaffold import new_backend


def cmd_devices(args: argparse.Namespace) -> int:
    """Lists installed backends, their devices, and why a backend is unavailable."""
    statuses = REGISTRY.statuses()
    if not statuses:
        print("no axle backends are installed (entry-point group 'axle.backends')")
        return 1
    try:
        default = REGISTRY.default_device().name
    except Exception:  # noqa: BLE001 - nothing available is reported below
        default = None
    for st in statuses.values():
        if not st.available or st.backend is None:
            print(f"{st.name:<12} unavailable: {st.reason}")
            continue
        b = st.backend
        print(f"{st.name:<12} api {b.api_version[0]}.{b.api_version[1]}  ({type(b).__module__})")
        for d in b.devices():
            mark = "*" if d.name == default else " "
            extra = ", ".join(f"{k}={v}" for k, v in d.properties.items())
            print(f"  {mark} {d.name:<14} {d.kind:<6} {d.description}" + (f"  [{extra}]" if extra else ""))
    if default:
        print(f"default device: {default}")
    return 0


def cmd_explain(args: argparse.Namespace) -> int:
    """What the compiler does with FILE.py:fn for the given argument types (see axle.explain)."""
    return run_explain(args)


def cmd_explain_op(args: argparse.Namespace) -> int:
    """One op's whole story (see axle.explain_op); --write-docs DIR writes docs/ops/."""
    return explain_op_main(args.name, args.write_docs)


def _explain_op_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("name", nargs="?", default=None,
                   help="the op: its IR name (tanh, reduce, dot) or enum name (exp, dot_general)")
    p.add_argument("--write-docs", metavar="DIR", default=None,
                   help="write DIR/<op>.md for every op and DIR/README.md (make docs-ops: docs/ops)")


def cmd_trace(args: argparse.Namespace) -> int:
    """Checks trace files against the trace-event format and prints where the time went."""
    status = 0
    for path in args.files:
        with open(path) as f:
            problems = profiler.validate(json.load(f))
        print(f"== {path}: " + ("valid trace-event JSON" if not problems else f"{len(problems)} problems"))
        for p in problems[:20]:
            print("  " + p)
        status |= bool(problems)
        print(profiler.summary(profiler.load(path)))
    return status


def _explain_args(p: argparse.ArgumentParser) -> None:
    add_arguments(p)


def _trace_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("files", nargs="+", help="trace JSON files (from axle.profiler.trace or --trace_to)")


def cmd_doctor(args: argparse.Namespace) -> int:
    """Checks every backend: import, devices, a tiny kernel against the interpreter."""
    return doctor_main(args.timeout)


def _doctor_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--timeout", type=float, default=TIMEOUT_S,
                   help=f"seconds one backend's check may take before it counts as hung (default {TIMEOUT_S:g})")


def cmd_new_backend(args: argparse.Namespace) -> int:
    """Copies the template backend under a new name, ready for `pip install -e`."""
    try:
        out = new_backend(args.name, args.dir)
    except AxleError as e:
        print(f"axle new-backend: {e}", file=sys.stderr)
        return 2
    print(f"created axle-{args.name} in {out}\nnext steps (docs/writing-a-backend.md):\n"
          f"  pip install -e {out}\n  axle devices                   # shows {args.name}:0\n"
          f"  python -m axle.testing {args.name}  # the conformance kit (needs pip install 'axle[kit]')")
    return 0


def _new_backend_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("name", help="backend name: device prefix NAME:0, package axle_NAME")
    p.add_argument("dir", nargs="?", default=None, help="target folder (default ./axle-NAME)")


def cmd_run(args: argparse.Namespace) -> int:
    """Loads an ONNX model, compiles and runs it on a device, and reports (axle.onnx.run)."""
    try:
        from .onnx import run as onnx_run  # the onnx extra: imported only by this command
    except ImportError as e:
        print(f"axle run: needs the onnx package (pip install 'axle[onnx]'): {e}", file=sys.stderr)
        return 2
    return onnx_run.run(args)


def _run_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="an ONNX model file")
    p.add_argument("--device", default=None, help="device to run on (default: the default device)")
    p.add_argument("--input", action="append", default=[], metavar="NAME=FILE.npy",
                   help="an input's value (default: seeded random values of the declared shape)")
    p.add_argument("--bench", type=int, default=0, metavar="N", help="time N runs after the first")
    p.add_argument("--compare", choices=["onnxruntime"], default=None,
                   help="run the model with onnxruntime too and compare the outputs")
    p.add_argument("--check", action="store_true", help="only list every node the importer cannot run")
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    p.add_argument("--initializers-as-constants", action="store_true",
                   help="compile the initializers into the model as constants, not arguments "
                        "(batch norms folded, weights prepacked; larger compiles and cache entries)")


COMMANDS: dict[str, tuple[Callable[[argparse.Namespace], int], str]] = {
    "devices": (cmd_devices, "list backends and devices"),
    "doctor": (cmd_doctor, "check every installed backend and say why one does not work"),
    "new-backend": (cmd_new_backend, "create a new backend from the template: NAME [DIR]"),
    "explain": (cmd_explain, "show the optimized module, fusions, buffers, placement and kernel code of a function"),
    "explain-op": (cmd_explain_op, "show an op's rules, tables and each backend's claim and lowering: NAME"),
    "trace": (cmd_trace, "validate a timeline file and summarize it"),
    "run": (cmd_run, "load an ONNX model, run it on a device and report: MODEL.onnx (--check, --bench, --compare)"),
}
#: subcommands that take arguments: name -> function adding them to its parser
ARGUMENTS: dict[str, Callable[[argparse.ArgumentParser], None]] = {
    "doctor": _doctor_args,
    "new-backend": _new_backend_args,
    "explain": _explain_args,
    "explain-op": _explain_op_args,
    "trace": _trace_args,
    "run": _run_args,
}


def plugin_commands() -> dict[str, object]:
    """Commands contributed by installed distributions (entry-point group
    ``axle.commands``): a module with ``HELP``, ``add_arguments(parser)`` and
    ``run(args) -> int`` (e.g. ``axle aot`` from axle-cpu). Import failures are skipped."""
    out: dict[str, object] = {}
    for ep in entry_points(group="axle.commands"):
        if ep.name in COMMANDS:
            continue
        try:
            out[ep.name] = ep.load()
        except Exception:  # noqa: BLE001 - a broken plugin must not break the CLI
            continue
    return out


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="axle", description="axle compiler SDK")
    sub = p.add_subparsers(dest="command", required=True)
    for name, (_, help_) in COMMANDS.items():
        sp = sub.add_parser(name, help=help_, description=help_)
        if name in ARGUMENTS:
            ARGUMENTS[name](sp)
    for name, mod in plugin_commands().items():
        mod.add_arguments(sub.add_parser(name, help=getattr(mod, "HELP", "")))  # type: ignore[attr-defined]  # plugin API
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command in COMMANDS:
        return COMMANDS[args.command][0](args)
    return plugin_commands()[args.command].run(args)  # type: ignore[attr-defined]  # a plugin command's run()


if __name__ == "__main__":
    sys.exit(main())
