"""The parser fuzz campaign: N mutated module texts (10,000 by default) through
parse + verify + compile + run on the interpreter; only axle errors may come out.

    .venv/bin/python tools/parser_fuzz.py [--n 10000] [--seed 0] [--no-optimize]
    .venv/bin/python -O tools/parser_fuzz.py      # also with asserts stripped

Mutant i is rebuilt from its number (see axle.testing.ir_mutations.campaign); each break
is printed with its number, exception and text. Exit status 1 when there is any."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from axle.testing.ir_mutations import campaign, corpus

ROOT = Path(__file__).resolve().parent.parent


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=10_000, help="mutants to run (default 10,000)")
    ap.add_argument("--seed", type=int, default=0, help="number of the first mutant")
    ap.add_argument("--max-mutations", type=int, default=3, help="mutations applied to one text, at most")
    ap.add_argument("--no-optimize", action="store_true", help="compile without the optimizer")
    ap.add_argument("--show", type=int, default=5, help="breaks printed in full")
    args = ap.parse_args(argv)
    texts = corpus(str(ROOT / "examples" / "aot" / "models.py"))
    report = campaign(texts, args.n, seed=args.seed, max_mutations=args.max_mutations,
                      optimize=not args.no_optimize)
    asserts = "off (python -O)" if not __debug__ else "on"
    print(f"parser fuzz over {len(texts)} base texts, asserts {asserts}: {report.summary()}")
    for number, kind, message, text in report.breaks[:args.show]:
        print(f"\n--- mutant {number}: {kind}: {message[:500]}\n{text[:4000]}")
    return 1 if report.breaks else 0


if __name__ == "__main__":
    sys.exit(main())
