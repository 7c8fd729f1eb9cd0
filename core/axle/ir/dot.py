"""GraphViz DOT export: one node per instruction, fusions drawn as clusters."""
from __future__ import annotations

from .module import Computation, Module, Node
from .ops import Op

_COLORS = {"movement": "#dbe9f6", "reduction": "#f6e3c6", "elementwise": "#e4f2dc", "other": "#eeeeee"}


def _color(n: Node) -> str:
    t = n.traits
    if t.reduction:
        return _COLORS["reduction"]
    if t.movement:
        return _COLORS["movement"]
    if t.elementwise:
        return _COLORS["elementwise"]
    return _COLORS["other"]


def _label(n: Node) -> str:
    name = n.name or n.op.value
    return f"{name}\\n{n.op.value}\\n{n.type}".replace('"', "'")


def _emit(comp: Computation, prefix: str, lines: list[str], indent: str,
          colors: dict[int, str] | None) -> dict[int, str]:
    ids: dict[int, str] = {}
    for i, n in enumerate(comp.nodes):
        nid = f"{prefix}n{i}"
        ids[n.uid] = nid
        if n.op is Op.FUSION:
            sub = n.attr["computation"]
            lines.append(f'{indent}subgraph cluster_{nid} {{')
            lines.append(f'{indent}  label="{n.name or "fusion"} (kind={n.attr["kind"]})"; style="rounded,filled"; fillcolor="#fff8e0";')
            inner = _emit(sub, nid + "_", lines, indent + "  ", None)
            lines.append(f"{indent}}}")
            ids[n.uid] = inner[sub.root.uid]
            for j, o in enumerate(n.operands):
                lines.append(f'{indent}{ids[o.uid]} -> {inner[sub.parameters[j].uid]} [style=dashed];')
            continue
        fill = (colors or {}).get(n.uid) or _color(n)
        shape = "ellipse" if n.op is Op.PARAMETER else "box"
        lines.append(f'{indent}{nid} [label="{_label(n)}", shape={shape}, style=filled, fillcolor="{fill}"];')
        for o in n.operands:
            lines.append(f"{indent}{ids[o.uid]} -> {nid};")
    return ids


def module_to_dot(module: Module, colors: dict[int, str] | None = None) -> str:
    """DOT text for the entry computation; fused computations are drawn inside clusters.
    ``colors`` maps node uids to fill colors (e.g. placement by device)."""
    lines = [f'digraph "{module.name}" {{', '  rankdir=TB; node [fontname="monospace", fontsize=10];']
    _emit(module.entry, "", lines, "  ", colors)
    lines.append("}")
    return "\n".join(lines) + "\n"
