"""The core's layers, bottom to top. A module imports only from its own layer and the
layers below it; within a layer the imports form no cycle. ``tests/core/test_layering.py``
reads every module's imports with ``ast`` (importing nothing) and checks both rules, and
that no import hides inside a function unless :data:`LAZY_IMPORTS` names it with a reason.

Where the small utility modules sit: they go as low as their own imports allow, so that
every layer may use them. ``errors`` imports nothing; ``config`` only errors; ``forksafe``,
``lru``, ``counters``, ``gcfreeze`` and ``diskcache`` only config and each other; ``profiler`` reads op
names and node names from the IR; ``interpreter`` (the NumPy reference evaluator) reads
only the IR: all of them are in the ``ir`` layer. ``recompile`` (the retrace warnings
``jit`` gives on every trace) is frontend, so that ``jit`` can call it.

An upward call is turned around rather than hidden in a function: the upper layer
attaches what the lower one exposes. ``axle.numpy`` attaches the array methods to
``ArrayOps`` (as JAX's ``_array_methods`` does), ``axle.placement`` makes ``Device`` a
context manager (``with axle.device("cpu:0"):``) and ``axle.explain`` adds
``Lowered.explain``; ``axle/__init__`` imports all three, so ``import axle`` has them.
"""
from __future__ import annotations

#: (layer, its modules and packages), bottom to top. A module belongs to the entry that
#: names it or the package holding it (the longest match); ``axle`` itself, the package
#: ``__init__`` that imports the public API, is the top.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("ir", ("axle.ir", "axle.errors", "axle.config", "axle.forksafe", "axle.lru", "axle.counters",
            "axle.diskcache", "axle.profiler", "axle.interpreter", "axle.cache_json", "axle.gcfreeze",
            "axle.constant_store")),
    ("passes", ("axle.passes",)),
    ("contract", ("axle.backend", "axle.registry", "axle.transfer")),
    ("lowering", ("axle.lowering",)),
    ("device compilation", ("axle.device_compile", "axle.backends", "axle.module_cache")),
    ("partition", ("axle.partition",)),
    ("compiler", ("axle.compiler", "axle.placement")),
    ("frontend", ("axle.frontend", "axle.numpy", "axle.lax", "axle.nn", "axle.random", "axle.autodiff",
                  "axle.optimizers", "axle.recompile", "axle.tree_util", "axle.sharding", "axle.distributed")),
    ("tools", ("axle", "axle.__main__", "axle.explain", "axle.explain_cli", "axle.explain_html", "axle.explain_op",
               "axle.source_refs", "axle.doctor", "axle.cli", "axle.scaffold", "axle.testing", "axle.layers",
               "axle.onnx")),
)

#: Imports allowed inside a function: (importing module, imported module, why it is lazy).
#: Only heavy or optional dependencies, and what must not load before it is asked for.
LAZY_IMPORTS: tuple[tuple[str, str, str], ...] = (
    ("axle.distributed", "mpi4py",
     "mpi4py is the optional `mpi` extra and starts MPI when imported: only a multi-process run's "
     "initialize() loads it"),
    ("axle.testing.environment", "pytest",
     "pytest is the `kit` extra, not a dependency of axle: kit_unavailable() asks whether it imports, "
     "require_backend() runs only inside a pytest run"),
    ("axle.cli", "axle.onnx.run", "the onnx extra: `axle run` imports the importer (and onnx) only when it runs"),
    ("axle.onnx.run", "onnxruntime", "optional: only `axle run --compare onnxruntime` needs it, says so without"),
    ("axle.explain_cli", "axle.onnx.run",
     "the onnx extra: `axle explain MODEL.onnx` imports the importer (and onnx) only for an ONNX model"),
    ("axle.testing.__main__", "pytest",
     "pytest is the `kit` extra: `python -m axle.testing` says how to install it instead of failing to import"),
)


def layer_of(module: str) -> tuple[int, str] | None:
    """(rank, name) of the layer ``module`` (dotted, ``axle.…``) belongs to; None when no
    entry of :data:`LAYERS` covers it."""
    best: tuple[int, int, str] | None = None
    for rank, (name, members) in enumerate(LAYERS):
        for m in members:
            covers = module == m or (m != "axle" and module.startswith(m + "."))
            if covers and (best is None or len(m) > best[0]):
                best = (len(m), rank, name)
    return None if best is None else (best[1], best[2])
