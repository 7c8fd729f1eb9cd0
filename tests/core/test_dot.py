"""Graph pictures: DOT with fusion clusters and placement colors, rendered by GraphViz."""
from __future__ import annotations

import shutil
import xml.etree.ElementTree as ET

import numpy as np
import pytest

import axle
import axle.numpy as anp
from axle.errors import AxleError
from axle.ir import dot as dotmod
from axle.ir.builder import Builder, make_node
from axle.ir.dot import module_to_dot, render, write_graph
from axle.ir.ops import Op
from axle.testing import IN_CI

SVG_NS = "{http://www.w3.org/2000/svg}"


def need_dot() -> None:
    if shutil.which("dot") is None:
        msg = "GraphViz dot is not installed (tools/system_deps.sh installs it)"
        if IN_CI:
            pytest.fail(msg)
        pytest.skip(msg)


def two_fusions():
    """softmax-like: an input fusion (row max) feeding a loop fusion (exp(x - max))."""
    b = Builder("max_row")
    p = b.parameter("f32[4,8]")
    red = b.computation(b.op(Op.REDUCE, b.op(Op.EXP, p), axes=(1,), kind="max"))
    b2 = Builder("sub_exp")
    q, m = b2.parameter("f32[4,8]"), b2.parameter("f32[4]")
    bm = b2.op(Op.BROADCAST_IN_DIM, m, shape=(4, 8), broadcast_dimensions=(0,))
    loop = b2.computation(b2.op(Op.EXP, b2.op(Op.SUB, q, bm)))
    outer = Builder("softmaxish")
    x = outer.parameter("f32[4,8]", name="x")
    f1 = make_node(Op.FUSION, (x,), {"kind": "input", "computation": red})
    f2 = make_node(Op.FUSION, (x, f1), {"kind": "loop", "computation": loop})
    return outer.build(outer.op(Op.NEG, f2))


def test_fusions_are_clusters_with_their_inner_ops():
    text = module_to_dot(two_fusions())
    assert text.count("subgraph cluster_") == 2
    assert "%fusion (input) [exponential, reduce]" in text
    assert "%fusion.1 (loop) [broadcast, exponential, subtract]" in text
    assert "%subtract" in text and "max axes=[1]" in text
    # operands enter the cluster through its parameters (dashed edges)
    assert "[style=dashed]" in text


def test_placement_colors_nodes_by_device_with_a_legend():
    m = two_fusions()
    fusions = [n for n in m.entry.nodes if n.op is Op.FUSION]
    placement = {fusions[0].uid: "cpu:0", fusions[1].uid: "opencl:0",
                 m.entry.root.uid: "interpreter:0"}
    text = module_to_dot(m, placement=placement)
    colors = dotmod.device_colors(["cpu:0", "opencl:0", "interpreter:0"])
    assert len(set(colors.values())) == 3
    assert colors["interpreter:0"] == dotmod._HOST_COLOR  # the fallback is grey
    assert "cluster_legend" in text
    for dev, color in colors.items():
        assert f'label="{dev}", shape=box, style=filled, fillcolor="{color}"' in text
    assert "@opencl:0" in text and "@cpu:0" in text
    # a named host (the partitioner's fallback device) is the grey one
    assert dotmod.device_colors(["template:0", "cpu:0"], host="cpu:0")["cpu:0"] == dotmod._HOST_COLOR
    assert dotmod.device_colors(["template:0", "cpu:0"], host="cpu:0")["template:0"] != dotmod._HOST_COLOR
    # explicit colors still win (the old API)
    custom = module_to_dot(m, colors={m.entry.root.uid: "#123456"})
    assert "#123456" in custom


def test_svg_parses_and_names_every_fusion(tmp_path):
    need_dot()
    m = two_fusions()
    svg = render(module_to_dot(m), "svg")
    root = ET.fromstring(svg)
    assert root.tag == f"{SVG_NS}svg"
    texts = " ".join(t.text or "" for t in root.iter(f"{SVG_NS}text"))
    titles = [t.text for t in root.iter(f"{SVG_NS}title")]
    assert sum(1 for t in titles if t and t.startswith("cluster_")) == 2
    assert "%fusion (input) [exponential, reduce]" in texts
    assert "%fusion.1 (loop) [broadcast, exponential, subtract]" in texts


def test_write_graph_by_extension(tmp_path):
    m = two_fusions()
    p = write_graph(m, str(tmp_path / "g.dot"))
    assert open(p).read().startswith('digraph "softmaxish"')
    need_dot()
    png = write_graph(m, str(tmp_path / "g.png"))
    assert open(png, "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    svg = write_graph(m, str(tmp_path / "g.svg"))
    ET.parse(svg)


def test_render_without_graphviz_says_how_to_install(monkeypatch):
    monkeypatch.setattr(dotmod.shutil, "which", lambda name: None)
    assert not dotmod.dot_available()
    with pytest.raises(AxleError, match="graphviz"):
        render("digraph g {}", "svg")


def test_traced_module_dot_and_labels_are_escaped():
    def f(x, y):
        return anp.sum(anp.exp(x) * y, axis=0)

    x = np.ones((3, 5), np.float32)
    with axle.device("interpreter:0"):
        low = axle.jit(f).lower(x, x)
    text = low.as_dot()
    assert text.startswith('digraph "f"') and "%exponential" in text and "%reduce" in text
    bad = Builder('we"ird')
    p = bad.parameter("f32[2]", name="a")
    assert 'digraph "we\\"ird"' in module_to_dot(bad.build(bad.op(Op.NEG, p)))
