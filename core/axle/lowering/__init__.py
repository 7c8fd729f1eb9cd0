"""The target-independent lowering layer between the optimizer and a backend's emitter.

- :mod:`axle.lowering.index`: index algebra, the output-index -> operand-index maps of the
  movement ops as small expressions any emitter can print or walk;
- :mod:`axle.lowering.c`: the C-family renderer (an op -> C expression table with the IR's
  exact semantics, loop nests for fusions and reductions) with its dialects (C99, OpenCL C).

Layering (DESIGN.md): this package imports ir, passes and the backend contract, never the
compiler facade, the frontend or a backend.
"""
