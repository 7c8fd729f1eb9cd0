"""``python -m axle.testing NAME [--quick] [pytest options]``: runs the conformance kit."""
from __future__ import annotations

import sys

from .environment import kit_unavailable


def main(argv: list[str] | None = None) -> int:
    why = kit_unavailable()
    if why:
        print(f"python -m axle.testing: {why}", file=sys.stderr)
        return 2
    import pytest

    from .plugin import SUITE

    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0].startswith("-"):
        print("usage: python -m axle.testing NAME[:INDEX] [--quick] [pytest options]", file=sys.stderr)
        return 2
    target, rest = args[0], args[1:]
    if "--quick" in rest:
        rest = [a if a != "--quick" else "--axle-quick" for a in rest]
    return int(pytest.main([SUITE, "-p", "axle.testing.plugin", "-p", "no:cacheprovider", "-q",
                            "--axle-backend", target, *rest,
                            # axle is imported already (this module is part of it): nothing to rewrite
                            "-W", "ignore::pytest.PytestAssertRewriteWarning"]))


if __name__ == "__main__":
    sys.exit(main())
