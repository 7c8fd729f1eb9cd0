"""The HTML report of ``axle explain --html``: one self-contained page with the module
pictured after each optimizer stage side by side (SVG inlined, rendered by GraphViz),
the kernels with their fusion reasons, buffers, placement and generated code."""
from __future__ import annotations

import html
from typing import TYPE_CHECKING

from .ir.dot import dot_available, render

if TYPE_CHECKING:
    from .explain import Explanation, Kernel

_CSS = """
body { font-family: system-ui, sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.3em; } h2 { font-size: 1.1em; margin-top: 1.6em; border-bottom: 1px solid #ccc; }
.stages { display: flex; gap: 1em; overflow-x: auto; align-items: flex-start; padding-bottom: 1em; }
.stage { flex: 0 0 auto; border: 1px solid #ddd; border-radius: 6px; padding: .5em; background: #fafafa; }
.stage h3 { font-size: .95em; margin: 0 0 .4em 0; font-family: monospace; }
.stage svg { max-height: 80vh; width: auto; height: auto; }
pre { background: #f6f6f6; padding: .8em; overflow-x: auto; font-size: .85em; }
table { border-collapse: collapse; font-size: .9em; }
td, th { border: 1px solid #ddd; padding: .25em .6em; text-align: left; vertical-align: top; }
.fallback { background: #fde2e2; } .why { color: #555; font-size: .9em; }
"""


def _svg(dot_text: str) -> str:
    """Inline SVG for a DOT graph, or the DOT text when GraphViz is missing."""
    if not dot_available():
        return ("<p>GraphViz <code>dot</code> is not installed; the DOT source follows "
                "(paste it into any GraphViz viewer).</p><pre>" + html.escape(dot_text) + "</pre>")
    svg = render(dot_text, "svg").decode()
    return svg[svg.find("<svg"):]  # drop the XML prolog and doctype to inline it


def _called_rows(k: Kernel, depth: int) -> list[str]:
    """Rows for the kernels a loop's or conditional's computations launch, indented."""
    e = html.escape
    pad = "&nbsp;" * 4 * depth
    rows = []
    for role, subs in k.calls:
        rows.append(f"<tr><td colspan='5'>{pad}<span class='why'>{e(role)}: {len(subs)} kernel launch(es) per "
                    f"{'trip' if k.op == 'while' else 'call'}</span></td></tr>")
        for s in subs:
            rows.append(f"<tr><td>{pad}<code>{e(s.title)}</code></td><td>{e(', '.join(s.ops))}</td>"
                        f"<td><code>{e(s.type)}</code></td><td>{e(s.device)}</td><td>&mdash;</td></tr>")
            rows += _called_rows(s, depth + 1)
    return rows


def explanation_html(expl: Explanation) -> str:
    e = html.escape
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>axle explain {e(expl.function)}</title>"
             f"<style>{_CSS}</style></head><body>",
             f"<h1>axle explain: <code>{e(expl.function)}</code> on <code>{e(expl.device.name)}</code> "
             f"&mdash; {len(expl.kernels)} kernel launch(es) per call</h1>",
             "<h2>Pass by pass</h2><div class='stages'>"]
    for i, (name, _module) in enumerate(expl.stages):
        parts.append(f"<div class='stage'><h3>{i}. {e(name)}</h3>{_svg(expl.dot(i))}</div>")
    parts.append("</div>")

    parts.append(f"<h2>Kernels</h2><p class='why'>Why neighbours were not fused: {e(expl.reasons_source)}.</p>"
                 "<table><tr><th>kernel</th><th>ops inside</th><th>result</th><th>device</th>"
                 "<th>not fused with</th></tr>")
    for k in expl.kernels:
        cls = " class='fallback'" if k.device != expl.device.name else ""
        why = "<br>".join(f"{e(nb.direction)} <code>%{e(nb.name)}</code>: <span class='why'>{e(nb.reason)}</span>"
                          for nb in k.neighbours) or "&mdash;"
        parts.append(f"<tr{cls}><td><code>{e(k.title)}</code></td><td>{e(', '.join(k.ops))}</td>"
                     f"<td><code>{e(k.type)}</code></td><td>{e(k.device)}</td><td>{why}</td></tr>")
        parts += _called_rows(k, 1)
    parts.append("</table>")
    parts.append("<h2>Buffers</h2><pre>" + e("\n".join(expl.buffers_text())) + "</pre>")
    parts.append("<h2>Placement</h2><pre>" + e("\n".join(expl.placement_text())) + "</pre>")
    if expl.communication:
        parts.append("<h2>Communication</h2><pre>" + e("\n".join(expl.communication_text())) + "</pre>")
    parts.append("<h2>Optimized module</h2><pre>" + e(expl.optimized.as_text()) + "</pre>")
    parts.append("<h2>Traced module</h2><pre>" + e(expl.traced.as_text()) + "</pre>")
    parts.append(f"<h2>Generated code ({e(expl.device.backend)})</h2>")
    if not expl.kernel_sources:
        parts.append(f"<p>Backend <code>{e(expl.device.backend)}</code> generates no source code.</p>")
    for name, src in expl.kernel_sources.items():
        parts.append(f"<h3><code>{e(name)}</code></h3><pre>{e(src)}</pre>")
    parts.append("</body></html>\n")
    return "\n".join(parts)
