"""GraphViz pictures of modules.

:func:`module_to_dot` draws one box per instruction, named as the printed module names
it (``%add.4``), with each fusion drawn as a cluster holding its inner ops; optionally
each node is colored by the device it was placed on. :func:`render` turns DOT text into
SVG/PNG/PDF with GraphViz ``dot``; :func:`write_graph` picks the format from a file name.
"""
from __future__ import annotations

import shutil
import subprocess
from collections.abc import Mapping
from typing import TYPE_CHECKING

from ..errors import AxleError
from .ops import Op
from .printer import _node_names

if TYPE_CHECKING:  # module.py imports this module for Module.as_text/as_dot
    from .computation import Computation
    from .module import Module, Node

#: node fill by what the op does (without placement)
_TRAIT_COLORS = {"movement": "#dbe9f6", "reduction": "#f6e3c6", "elementwise": "#e4f2dc",
                 "dot": "#f3d9ec", "other": "#eeeeee"}
#: device colors, assigned in first-seen order (host fallback always gets grey)
_DEVICE_PALETTE = ("#a6cee3", "#b2df8a", "#fdbf6f", "#cab2d6", "#fb9a99", "#ffff99", "#8dd3c7")
_HOST_COLOR = "#d9d9d9"
_FUSION_FILL = "#fff8e0"


def _trait_color(n: Node) -> str:
    t = n.traits
    if n.op is Op.DOT_GENERAL:
        return _TRAIT_COLORS["dot"]
    if t.reduction:
        return _TRAIT_COLORS["reduction"]
    if t.movement:
        return _TRAIT_COLORS["movement"]
    if t.elementwise:
        return _TRAIT_COLORS["elementwise"]
    return _TRAIT_COLORS["other"]


def _esc(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')


def _label(n: Node, name: str) -> str:
    if n.op is Op.PARAMETER:
        return f"%{_esc(name)} (param {n.attr['index']})\\n{n.type}"
    # The op is shown unless the printed name already says it (%add.4 is an add).
    op = "" if name.split(".")[0] == n.op.value else f"\\n{n.op.value}"
    if n.op is Op.REDUCE:
        op += f"\\n{n.attr['kind']} axes={list(n.attr['axes'])}"
    return f"%{_esc(name)}{op}\\n{n.type}"


def device_colors(devices: list[str], host: str | None = None) -> dict[str, str]:
    """A stable color per device name. In a placement with several devices the fallback
    host is grey: ``host`` when given, else names starting with 'host' or 'interpreter'."""
    out: dict[str, str] = {}
    i = 0
    for d in devices:
        if d in out:
            continue
        is_host = d == host if host is not None else (d.startswith("host") or d.startswith("interpreter"))
        if is_host and len(set(devices)) > 1:
            out[d] = _HOST_COLOR
        else:
            out[d] = _DEVICE_PALETTE[i % len(_DEVICE_PALETTE)]
            i += 1
    return out


def fusion_title(n: Node, name: str) -> str:
    """``fusion.3 (input) [add, multiply, reduce]``: the cluster label and what
    timelines call the kernel."""
    inner = sorted({m.op.value for m in n.attr["computation"].nodes
                    if not m.traits.structural and m.op is not Op.CONSTANT})
    return f"%{name} ({n.attr['kind']}) [{', '.join(inner)}]"


class _Drawer:
    def __init__(self, colors: Mapping[int, str] | None, placement: Mapping[int, str] | None,
                 host: str | None = None) -> None:
        self.colors = dict(colors or {})
        self.placement = dict(placement or {})
        self.dev_colors = device_colors(list(self.placement.values()), host)
        self.lines: list[str] = []

    def fill(self, n: Node) -> str:
        if n.uid in self.colors:
            return self.colors[n.uid]
        if n.uid in self.placement:
            return self.dev_colors[self.placement[n.uid]]
        return _trait_color(n)

    def emit(self, comp: Computation, prefix: str, indent: str, inner: bool) -> dict[int, str]:
        names = _node_names(comp)
        ids: dict[int, str] = {}
        for i, n in enumerate(comp.nodes):
            nid = f"{prefix}n{i}"
            ids[n.uid] = nid
            if n.op is Op.FUSION:
                ids[n.uid] = self.fusion(n, names[n.uid], nid, ids, indent)
                continue
            fill = _trait_color(n) if inner else self.fill(n)
            shape = "ellipse" if n.op is Op.PARAMETER else ("octagon" if n.op is Op.DOT_GENERAL else "box")
            style = "filled,dashed" if inner and n.op is Op.PARAMETER else "filled"
            dev = f'\\n@{_esc(self.placement[n.uid])}' if not inner and n.uid in self.placement else ""
            self.lines.append(f'{indent}{nid} [label="{_label(n, names[n.uid])}{dev}", shape={shape}, '
                              f'style="{style}", fillcolor="{fill}"];')
            for o in n.operands:
                self.lines.append(f"{indent}{ids[o.uid]} -> {nid};")
        return ids

    def fusion(self, n: Node, name: str, nid: str, ids: dict[int, str], indent: str) -> str:
        sub = n.attr["computation"]
        fill = self.colors.get(n.uid) or (self.dev_colors[self.placement[n.uid]] if n.uid in self.placement
                                         else _FUSION_FILL)
        where = f" @{self.placement[n.uid]}" if n.uid in self.placement else ""
        self.lines.append(f"{indent}subgraph cluster_{nid} {{")
        self.lines.append(f'{indent}  label="{_esc(fusion_title(n, name) + where)}"; style="rounded,filled"; '
                          f'fillcolor="{fill}"; fontname="monospace"; fontsize=11;')
        inner = self.emit(sub, nid + "_", indent + "  ", inner=True)
        self.lines.append(f"{indent}}}")
        for j, o in enumerate(n.operands):
            self.lines.append(f"{indent}{ids[o.uid]} -> {inner[sub.parameters[j].uid]} [style=dashed];")
        return inner[sub.root.uid]

    def legend(self, indent: str) -> None:
        if not self.dev_colors:
            return
        self.lines.append(f'{indent}subgraph cluster_legend {{ label="placement"; style=dashed; fontsize=10;')
        for i, (dev, color) in enumerate(self.dev_colors.items()):
            self.lines.append(f'{indent}  legend{i} [label="{_esc(dev)}", shape=box, style=filled, '
                              f'fillcolor="{color}"];')
        self.lines.append(f"{indent}}}")


def module_to_dot(module: Module, colors: dict[int, str] | None = None, *,
                  placement: Mapping[int, str] | None = None, host: str | None = None,
                  title: str | None = None) -> str:
    """DOT text for the entry computation; fused computations are drawn as clusters with
    their inner ops. ``colors`` maps node uids to fill colors; ``placement`` maps entry
    node uids to device names, coloring each node by device (with a legend; ``host``,
    the fallback device, is grey)."""
    d = _Drawer(colors, placement, host)
    label = f'  label="{_esc(title)}"; labelloc=t; fontsize=14;' if title else ""
    d.lines += [f'digraph "{_esc(module.name)}" {{',
                '  rankdir=TB; node [fontname="monospace", fontsize=10]; edge [arrowsize=0.6];' + label]
    d.emit(module.entry, "", "  ", inner=False)
    d.legend("  ")
    d.lines.append("}")
    return "\n".join(d.lines) + "\n"


def dot_available() -> bool:
    """True when GraphViz ``dot`` is on PATH."""
    return shutil.which("dot") is not None


def render(dot_text: str, fmt: str = "svg", timeout: float = 60.0) -> bytes:
    """Runs GraphViz ``dot -T<fmt>`` on DOT text (svg, png, pdf...)."""
    exe = shutil.which("dot")
    if exe is None:
        raise AxleError("GraphViz 'dot' is not installed, so graphs can only be written as .dot text; "
                        "install it with tools/system_deps.sh (Debian package 'graphviz')")
    proc = subprocess.run([exe, f"-T{fmt}"], input=dot_text.encode(), capture_output=True, timeout=timeout)
    if proc.returncode != 0:
        raise AxleError(f"GraphViz dot failed (-T{fmt}): {proc.stderr.decode(errors='replace').strip()}")
    return proc.stdout


def write_graph(module: Module, path: str, **options: object) -> str:
    """Writes a picture of ``module`` to ``path``: ``.dot``/``.gv`` as text, any other
    extension (``.svg``, ``.png``, ``.pdf``) rendered with GraphViz. Returns the path."""
    text = module_to_dot(module, **options)  # type: ignore[arg-type]  # module_to_dot's keywords, passed on
    ext = path.rsplit(".", 1)[-1].lower() if "." in path else "dot"
    if ext in ("dot", "gv"):
        with open(path, "w") as f:
            f.write(text)
    else:
        with open(path, "wb") as f:
            f.write(render(text, ext))
    return path
