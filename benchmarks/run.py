"""Runs every ``benchmarks/bench_*.py`` module, prints its tables, and writes the report
(docs/benchmarks.md) with the machine described and a plot of speedup vs. NumPy per
workload and implementation (docs/benchmarks.png, with matplotlib).

    python benchmarks/run.py            # full run (what `make bench` does)
    python benchmarks/run.py --quick    # small sizes, few repeats: checks everything runs

A module defines ``run(quick: bool) -> list[Row]`` (benchmarks/common.py). A module that
fails to import or run is reported in the tables with its error and the others go on.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import importlib.util
import math
import os
import sys
import traceback
from collections.abc import Sequence
from dataclasses import dataclass, field

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
if HERE not in sys.path:
    sys.path.insert(0, HERE)  # bench modules import `common` as a sibling

from common import Row, machine  # noqa: E402


@dataclass
class SuiteResult:
    module: str
    rows: list[Row] = field(default_factory=list)
    error: str | None = None


def discover(folder: str) -> list[str]:
    """Paths of the bench_*.py modules in ``folder``, sorted by name."""
    return sorted(os.path.join(folder, f) for f in os.listdir(folder)
                  if f.startswith("bench_") and f.endswith(".py"))


def run_module(path: str, quick: bool) -> SuiteResult:
    name = os.path.splitext(os.path.basename(path))[0]
    try:
        spec = importlib.util.spec_from_file_location(f"_axle_bench_{name}", path)
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = mod  # dataclasses and pickling look the module up
        spec.loader.exec_module(mod)
        rows = list(mod.run(quick))
        for r in rows:
            assert isinstance(r, Row), f"{name}.run returned {type(r).__name__}, not common.Row"
        return SuiteResult(name, rows)
    except Exception as e:  # noqa: BLE001 - one broken suite must not hide the others
        last = traceback.extract_tb(e.__traceback__)[-1]
        return SuiteResult(name, error=f"{type(e).__name__}: {e} ({os.path.basename(last.filename)}:{last.lineno})")


def _fmt_ms(v: float) -> str:
    if not math.isfinite(v):
        return "n/a"
    return f"{v:.3f}" if v < 10 else f"{v:.1f}"


def _fmt_extra(v: object) -> str:
    """Extra columns: numbers rounded, a per-implementation dict as 'impl value' pairs."""
    if isinstance(v, dict):
        return ", ".join(f"{k} {_fmt_extra(x)}" for k, x in v.items())
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def _fmt_x(v: float) -> str:
    return f"{v:.2f}x" if math.isfinite(v) else "n/a"


def impls(rows: Sequence[Row]) -> list[str]:
    """Implementations in first-seen order, the baselines first."""
    out: list[str] = []
    for r in rows:
        for k in [r.baseline, *r.times_ms]:
            if k not in out:
                out.append(k)
    return out


def table(rows: Sequence[Row]) -> list[list[str]]:
    """Header plus one line per row: ms per implementation, ratios vs. the baseline, extras."""
    names = impls(rows)
    extras: list[str] = []
    for r in rows:
        extras += [k for k in r.extra if k not in extras]
    others = [n for n in names if any(n in r.times_ms and n != r.baseline for r in rows)]
    head = ["workload", *[f"{n} ms" for n in names], *[f"{n} vs base" for n in others], *extras]
    out = [head]
    for r in rows:
        line = [r.workload]
        line += [_fmt_ms(r.times_ms[n]) if n in r.times_ms else "" for n in names]
        line += [_fmt_x(r.ratio(n)) if n in r.times_ms and n != r.baseline else "" for n in others]
        line += [_fmt_extra(r.extra.get(k, "")) for k in extras]
        out.append(line)
    return out


def groups(rows: Sequence[Row]) -> list[list[Row]]:
    """Rows split into runs that share one set of implementations and one baseline, so
    each table stays dense."""
    out: list[list[Row]] = []
    for r in rows:
        key = (r.baseline, tuple(r.times_ms))
        if out and (out[-1][0].baseline, tuple(out[-1][0].times_ms)) == key:
            out[-1].append(r)
        else:
            out.append([r])
    return out


def text_table(cells: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in cells) for i in range(len(cells[0]))]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths)))
             for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def md_table(cells: list[list[str]]) -> str:
    lines = ["| " + " | ".join(cells[0]) + " |", "|" + "|".join(["---"] + ["--:"] * (len(cells[0]) - 1)) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in cells[1:]]
    return "\n".join(lines)


def speedups(results: Sequence[SuiteResult]) -> list[tuple[str, dict[str, float]]]:
    """(workload label, {implementation: speedup vs NumPy}) for rows measured against NumPy."""
    out = []
    for s in results:
        for r in s.rows:
            if r.baseline != "numpy" or "numpy" not in r.times_ms:
                continue
            sp = {k: r.ratio(k) for k in r.times_ms if k != "numpy" and r.times_ms[k] > 0}
            if sp:
                out.append((f"{r.suite}: {r.workload}", sp))
    return out


def plot(results: Sequence[SuiteResult], path: str) -> str | None:
    """Grouped bars of speedup vs NumPy (log scale); None when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    data = speedups(results)
    if not data:
        return None
    names: list[str] = []
    for _, sp in data:
        names += [k for k in sp if k not in names]
    width = 0.8 / len(names)
    fig, ax = plt.subplots(figsize=(max(6.0, 0.9 * len(data) + 2), 5.0))
    for i, name in enumerate(names):
        xs = [j + (i - (len(names) - 1) / 2) * width for j in range(len(data))]
        ys = [sp.get(name, float("nan")) for _, sp in data]
        # Bars grow from 1x: up when faster than NumPy, down when slower.
        bars = ax.bar(xs, [y - 1.0 for y in ys], width, bottom=1.0, label=name)
        ax.bar_label(bars, labels=[f"{y:.2g}x" if math.isfinite(y) else "" for y in ys], fontsize=7)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_yscale("log")
    finite = [v for _, sp in data for v in sp.values() if math.isfinite(v) and v > 0] + [1.0]
    ax.set_ylim(min(finite) / 2, max(finite) * 2)  # room around the 1x line and the labels
    ax.set_ylabel("speedup vs NumPy (higher is faster)")
    ax.set_xticks(range(len(data)))
    ax.set_xticklabels([label for label, _ in data], rotation=30, ha="right", fontsize=8)
    ax.legend(fontsize=8)
    ax.set_title("axle vs NumPy, per workload and implementation")
    fig.tight_layout()
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def devices_line() -> str:
    try:
        import axle

        devs = axle.devices()
        return ", ".join(f"{d.name} ({d.description})" if d.description else d.name for d in devs)
    except Exception as e:  # noqa: BLE001 - the report still describes the machine
        return f"(device listing failed: {e})"


def report(results: Sequence[SuiteResult], quick: bool, plot_path: str | None, md_path: str,
           note: str = "") -> str:
    when = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "# Benchmarks",
        "",
        "Generated by `make bench` (`benchmarks/run.py`); do not edit by hand. Each figure is the",
        "median of interleaved repeats within one run (the order rotated every round); compare",
        "ratios, not absolute times across machines. Libraries that keep threads spinning after",
        "a call (OpenBLAS under NumPy, libgomp under the C loops) are set to wait passively",
        "(`OPENBLAS_THREAD_TIMEOUT=4`, `OMP_WAIT_POLICY=passive`), since a spinning thread",
        "steals a core from whatever runs next in the round. Rerun on a quiet machine before",
        "quoting numbers.",
        "",
        f"- Machine: {machine()}",
        f"- Devices: {devices_line()}",
        f"- Run: {when}, {'quick mode (small sizes, few repeats)' if quick else 'full mode'}",
        *([f"- Note: {note}"] if note else []),
        "",
    ]
    if plot_path:
        rel = os.path.relpath(plot_path, os.path.dirname(os.path.abspath(md_path)))
        lines += [f"![speedup vs NumPy per workload and implementation]({rel})", ""]
    else:
        lines += ["(No plot: matplotlib is not installed or no row is measured against NumPy; "
                  "`make bench` installs the `bench` extra.)", ""]
    for s in results:
        suite = s.rows[0].suite if s.rows else s.module
        lines += [f"## {suite} (`benchmarks/{s.module}.py`)", ""]
        if s.error:
            lines += [f"Failed: `{s.error}`", ""]
            continue
        if not s.rows:
            lines += ["No rows (nothing to measure on this machine).", ""]
            continue
        for g in groups(s.rows):
            lines += [md_table(table(g)), "",
                      f"Times in ms (median); ratios are `{g[0].baseline}` time / implementation time "
                      "(above 1x: faster than the baseline).", ""]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="small sizes and few repeats")
    p.add_argument("--only", action="append", default=[], help="run only bench_<NAME>.py (repeatable)")
    p.add_argument("--dir", default=HERE, help="folder holding the bench_*.py modules")
    p.add_argument("--out", default=os.path.join(ROOT, "docs", "benchmarks.md"), help="the markdown report")
    p.add_argument("--plot", default=None, help="the PNG plot (default: next to --out, .png)")
    p.add_argument("--no-write", action="store_true", help="print the tables only")
    p.add_argument("--note", default="", help="a line for the report, e.g. 'measured under load'")
    args = p.parse_args(argv)
    paths = discover(args.dir)
    if args.only:
        paths = [q for q in paths if os.path.basename(q)[len("bench_"):-3] in args.only]
    results = []
    for path in paths:
        print(f"== {os.path.basename(path)} ...", flush=True)
        res = run_module(path, args.quick)
        results.append(res)
        if res.error:
            print(f"   failed: {res.error}")
        elif not res.rows:
            print("   no rows (nothing to measure here)")
        for g in groups(res.rows):
            print(text_table(table(g)) + "\n")
        print(flush=True)
    if args.no_write:
        return 1 if any(r.error for r in results) else 0
    plot_path = plot(results, args.plot or os.path.splitext(args.out)[0] + ".png")
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        f.write(report(results, args.quick, plot_path, args.out, args.note))
    print(f"wrote {args.out}" + (f" and {plot_path}" if plot_path else " (no plot)"))
    return 1 if any(r.error for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
