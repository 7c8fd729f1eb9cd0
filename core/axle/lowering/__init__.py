"""The target-independent layer between the optimizer and a backend's code emitter.

- :mod:`axle.lowering.plan`: an optimized module as an ordered list of kernel launches over
  buffer slots, the same for every backend (:mod:`axle.lowering.fission` splits fusions
  over the inline-cost bound);
- :mod:`axle.lowering.index`: index algebra, the output-index -> operand-index maps of the
  movement ops as small expressions any emitter can print or walk;
- :mod:`axle.lowering.c`: the C-family renderer (an op -> C expression table with the IR's
  exact semantics, loop nests for fusions and reductions) with its dialects (C99, OpenCL C).

See docs/lowering.md. This package imports nothing at import time: backends are imported
in parallel threads by the registry, and a package whose ``__init__`` imports a submodule
deadlocks Python's import locks when one thread imports ``axle.lowering.c`` while another
imports ``axle.lowering.plan`` (each holds one module's lock and waits for the other's).
Import the submodule you need (``from axle.lowering.plan import kernel_plan``).
"""
