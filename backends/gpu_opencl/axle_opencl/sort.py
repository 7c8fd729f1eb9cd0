"""``sort`` on OpenCL: the shared C-family stable merge sort (axle.lowering.sort) in this
backend's OpenCL C dialect, one work-item per row (a grid-stride loop over the rows), its
two index scratch buffers allocated per call like outputs, its sizes int arguments (one
program per dtypes and attributes, whatever the shape). Long rows are right but run on
one work-item each; see docs/backend-opencl.md, "Sort"."""
from __future__ import annotations

import hashlib
from typing import Any

from axle.lowering.c import used_helpers
from axle.lowering.plan import KernelLaunch
from axle.lowering.sort import sort_kernel, sort_sizes

from .kernels import Kernel, check_size
from .render import CL, program_source

#: work-items launched at most for a sort (the grid-stride loop takes the other rows)
_MAX_ITEMS = 1 << 16


def sort_launch(launch: KernelLaunch) -> tuple[Kernel, list[Any]] | None:
    """The kernel of a sort launch and the slots of its outputs (the result's, then two
    scratch slots of its own); None when the result is empty."""
    comp = launch.computation
    check_size(comp.root)
    ck = sort_kernel(CL, "KERNEL", comp, outputs_first=True, sizes_as_args=True)
    if not ck.stages:
        return None
    fp64 = any(t.dtype.value == "f64" for t in ck.params + ck.outputs)
    helpers = tuple(used_helpers(CL, ck.source))
    src = program_source(ck.source, fp64, helpers)
    name = "axle_sort_" + hashlib.sha1(src.encode()).hexdigest()[:12]
    sizes = sort_sizes(comp)
    # outputs: the result, then two scratch index buffers in slots of their own
    outs = [("out", 0, ck.outputs[0]), ("out", 1, ck.scratch[0]), ("out", 2, ck.scratch[1])]
    kernel = Kernel(name, src.replace("KERNEL", name), "sort", outs,
                    [("param", i) for i in range(len(ck.params))], list(sizes),
                    global_size=(min(sizes[2], _MAX_ITEMS),),
                    uses_fp64=fp64, body=ck.source.replace("KERNEL", name), helpers=helpers)
    scratch = [("sort-scratch", id(kernel), k) for k in (0, 1)]
    return kernel, [launch.outputs[0], *scratch]
