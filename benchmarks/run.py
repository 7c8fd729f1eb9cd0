"""Runs every ``benchmarks/bench_*.py`` module, prints its tables, and writes the report
(docs/benchmarks.md) with the machine described, a before/after table against the previous
run's rows (docs/benchmarks.json, which this run then replaces) and a plot with one panel
per suite and eager dispatch on its own axis (docs/benchmarks.png, with matplotlib).

    python benchmarks/run.py            # full run (what `make bench` does)
    python benchmarks/run.py --quick    # small sizes, few repeats: checks everything runs

A module defines ``run(quick: bool) -> list[Row]`` (benchmarks/common.py). A module that
fails to import or run is reported in the tables with its error and the others go on.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import importlib.util
import json
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


def panels(results: Sequence[SuiteResult]) -> list[tuple[str, str, list[tuple[str, dict[str, float]]]]]:
    """The plot's panels: (title, x-axis label, [(row label, {implementation: value})]).
    One panel per suite holds each row's ratios against its own baseline (the label names
    the baseline when it is not NumPy); the eager-dispatch rows (``Row.kind ==
    "dispatch"``) go to one panel of their own in microseconds per call, since a ratio
    against NumPy's sub-microsecond add says nothing there."""
    out: list[tuple[str, str, list[tuple[str, dict[str, float]]]]] = []
    dispatch: list[tuple[str, dict[str, float]]] = []
    for s in results:
        bars: list[tuple[str, dict[str, float]]] = []
        for r in s.rows:
            if r.kind == "dispatch":
                dispatch.append((r.workload, {k: v * 1e3 for k, v in r.times_ms.items() if v > 0}))
                continue
            sp = {k: r.ratio(k) for k in r.times_ms if k != r.baseline and r.times_ms[k] > 0}
            if sp and r.times_ms.get(r.baseline, 0) > 0:
                label = r.workload if r.baseline == "numpy" else f"{r.workload} (vs {r.baseline})"
                bars.append((label, sp))
        if bars:
            out.append((s.rows[0].suite, "speedup vs the row's baseline (NumPy unless named; log)", bars))
    if dispatch:
        out.append(("eager dispatch", "microseconds per call (lower is faster; log)", dispatch))
    return out


def _wrap(label: str, width: int = 46) -> str:
    """A row label on at most two lines, cut at a space (long labels would overlap)."""
    if len(label) <= width:
        return label
    cut = label.rfind(" ", 0, width)
    cut = cut if cut > 0 else width
    rest = label[cut:].strip()
    return label[:cut] + "\n" + (rest if len(rest) <= width else rest[:width - 1] + "\u2026")


def plot(results: Sequence[SuiteResult], path: str) -> str | None:
    """One panel per suite (horizontal bars, so row labels never overlap) plus eager
    dispatch on its own axis; None when matplotlib is missing or nothing is measured."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    data = panels(results)
    if not data:
        return None
    names: list[str] = []
    for _, _, bars in data:
        for _, vals in bars:
            names += [k for k in vals if k not in names]
    colors = {n: plt.get_cmap("tab20")(i % 20) for i, n in enumerate(names)}
    heights = [max(1.6, 0.22 * sum(len(v) for _, v in bars) + 0.35 * len(bars) + 0.9) for _, _, bars in data]
    fig, axes = plt.subplots(len(data), 1, figsize=(10.0, sum(heights)), squeeze=False,
                             gridspec_kw={"height_ratios": heights})
    for ax, (title, xlabel, bars) in zip(axes[:, 0], data):
        _panel(ax, title, xlabel, bars, colors, ratio=not title.startswith("eager dispatch"))
    fig.tight_layout()
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _panel(ax, title: str, xlabel: str, bars: list[tuple[str, dict[str, float]]],  # noqa: ANN001 - a matplotlib Axes
           colors: dict, ratio: bool) -> None:
    """Grouped horizontal bars, one group per row, top to bottom in the tables' order."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter  # the optional `bench` extra

    y, ticks, labels = 0.0, [], []
    for label, vals in bars:
        n = len(vals)
        for i, (name, v) in enumerate(vals.items()):
            pos = y + i * 0.8 / max(n, 1)
            base = 1.0 if ratio else 0.0
            ax.barh(pos, v - base, 0.8 / max(n, 1), left=base, color=colors[name],
                    label=name if name not in ax.get_legend_handles_labels()[1] else None)
            left = v < base  # a bar growing left gets its label on its left end
            ax.annotate(f"{v:.2g}x" if ratio else f"{v:.3g}", (v, pos), xytext=(-3 if left else 3, 0),
                        textcoords="offset points", va="center", ha="right" if left else "left", fontsize=6)
        ticks.append(y + 0.4 - 0.4 / max(n, 1))
        labels.append(_wrap(label))
        y += 1.0
    ax.set_xscale("log")
    if ratio:
        ax.axvline(1.0, color="black", linewidth=0.8)
    vals_all = [v for _, vals in bars for v in vals.values() if math.isfinite(v) and v > 0] + ([1.0] if ratio else [])
    ax.set_xlim(min(vals_all) / 3, max(vals_all) * 3)
    ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))  # 0.5x, 1x, 2x, 5x, ...
    ax.xaxis.set_minor_formatter(NullFormatter())  # log-axis minor labels overlap
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}x" if ratio else f"{v:g}"))
    ax.set_yticks(ticks)
    ax.set_yticklabels(labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel(xlabel, fontsize=8)
    ax.set_title(title, fontsize=9, loc="left")
    ax.legend(fontsize=6, loc="best", ncol=2)


def results_json(results: Sequence[SuiteResult], quick: bool) -> dict:
    """Every row as plain data (docs/benchmarks.json), the next run's "before"."""
    return {"machine": machine(), "quick": quick,
            "when": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "rows": [{"suite": r.suite, "workload": r.workload, "baseline": r.baseline,
                      "times_ms": r.times_ms} for s in results for r in s.rows]}


def before_after(before: dict, results: Sequence[SuiteResult]) -> list[list[str]]:
    """Header plus one line per axle implementation of a row present in both runs: its ms
    and its ratio against the row's baseline (measured in the same run, so comparable
    across runs on one machine), before and now."""
    old = {(r["suite"], r["workload"]): r for r in before.get("rows", [])}
    out = [["suite", "workload", "implementation", "before ms", "now ms", "before vs base", "now vs base"]]
    for s in results:
        for r in s.rows:
            prev = old.get((r.suite, r.workload))
            if prev is None or prev.get("baseline") != r.baseline:
                continue
            for impl, ms in r.times_ms.items():
                was = prev["times_ms"].get(impl)
                if not impl.startswith("axle") or was is None or ms <= 0 or was <= 0:
                    continue
                base_was = prev["times_ms"].get(r.baseline, float("nan"))
                out.append([r.suite, r.workload, impl, _fmt_ms(was), _fmt_ms(ms),
                            _fmt_x(base_was / was), _fmt_x(r.ratio(impl))])
    return out


def devices_line() -> str:
    try:
        import axle

        devs = axle.devices()
        return ", ".join(f"{d.name} ({d.description})" if d.description else d.name for d in devs)
    except Exception as e:  # noqa: BLE001 - the report still describes the machine
        return f"(device listing failed: {e})"


def report(results: Sequence[SuiteResult], quick: bool, plot_path: str | None, md_path: str,
           note: str = "", before: dict | None = None) -> str:
    when = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "# Benchmarks",
        "",
        "Generated by `make bench` (`benchmarks/run.py`); do not edit by hand. Each figure is the",
        "median of interleaved repeats within one run (the order rotated every round); compare",
        "ratios, not absolute times across machines. Libraries that keep threads spinning for",
        "longer than many calls last (OpenBLAS under NumPy, libgomp under the C loops and torch)",
        "are set to wait passively (`OPENBLAS_THREAD_TIMEOUT=4`, `OMP_WAIT_POLICY=passive`), and",
        "each timed call follows an untimed call of the same implementation, so that it does not",
        "run beside the threads another library leaves spinning (the model suites, where",
        "onnxruntime's pool spins for tens of milliseconds after a call, settle each for 100 ms).",
        "Rerun on a quiet machine before quoting numbers.",
        "",
        f"- Machine: {machine()}",
        f"- Devices: {devices_line()}",
        f"- Run: {when}, {'quick mode (small sizes, few repeats)' if quick else 'full mode'}",
        *([f"- Note: {note}"] if note else []),
        "",
    ]
    if plot_path:
        rel = os.path.relpath(plot_path, os.path.dirname(os.path.abspath(md_path)))
        lines += [f"![speedup per suite against each row's baseline, and eager dispatch in microseconds]({rel})", ""]
    else:
        lines += ["(No plot: matplotlib is not installed or no row is measured against NumPy; "
                  "`make bench` installs the `bench` extra.)", ""]
    if before:
        cells = before_after(before, results)
        lines += ["## Before and after", "",
                  f"Against the previous report's run ({before.get('when', '?')}, "
                  f"{'quick' if before.get('quick') else 'full'} mode, on: {before.get('machine', '?')}). "
                  "Each ratio is taken within its own run, so ratios compare across runs on one "
                  "machine; absolute times only where the machine and its load were alike.", ""]
        lines += [md_table(cells) if len(cells) > 1 else "No row in common with the previous run.", ""]
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


def _read_before(path: str) -> dict | None:
    """A previous run's rows (``results_json``), None when absent or unreadable."""
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("rows"), list) else None


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="small sizes and few repeats")
    p.add_argument("--only", action="append", default=[], help="run only bench_<NAME>.py (repeatable)")
    p.add_argument("--dir", default=HERE, help="folder holding the bench_*.py modules")
    p.add_argument("--out", default=os.path.join(ROOT, "docs", "benchmarks.md"), help="the markdown report")
    p.add_argument("--plot", default=None, help="the PNG plot (default: next to --out, .png)")
    p.add_argument("--no-write", action="store_true", help="print the tables only")
    p.add_argument("--note", default="", help="a line for the report, e.g. 'measured under load'")
    p.add_argument("--before", default=None,
                   help="a previous run's JSON for the before/after table (default: the one beside --out)")
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
    json_path = os.path.splitext(args.out)[0] + ".json"
    before = _read_before(args.before or json_path)
    plot_path = plot(results, args.plot or os.path.splitext(args.out)[0] + ".png")
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        f.write(report(results, args.quick, plot_path, args.out, args.note, before))
    with open(json_path, "w") as f:
        json.dump(results_json(results, args.quick), f, indent=1)
    print(f"wrote {args.out}, {json_path}" + (f" and {plot_path}" if plot_path else " (no plot)"))
    return 1 if any(r.error for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
