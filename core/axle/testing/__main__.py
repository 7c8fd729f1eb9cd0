"""``python -m axle.testing NAME [--quick] [-n N] [--timeout S] [--in-process] [pytest options]``:
runs the conformance kit (N worker processes, S seconds per check; see plugin.py)."""
from __future__ import annotations

import sys

from .environment import SUITE, kit_unavailable

USAGE = "python -m axle.testing NAME[:INDEX] [--quick] [-n N] [--timeout S] [--in-process] [pytest options]"
#: the kit's short options and the plugin's options they stand for
_OPTIONS = {"--quick": "--axle-quick", "-n": "--axle-workers", "--timeout": "--axle-timeout",
            "--in-process": "--axle-in-process"}


def _kit_options(args: list[str]) -> list[str]:
    """The kit's own options as the plugin's (``-n 4``, ``-n4``, ``--timeout=30`` too)."""
    out = []
    for a in args:
        name, eq, value = a.partition("=")
        if name in _OPTIONS:
            out.append(_OPTIONS[name] + eq + value)
        elif a.startswith("-n") and a[2:].isdigit():
            out += ["--axle-workers", a[2:]]
        else:
            out.append(a)
    return out


def main(argv: list[str] | None = None) -> int:
    why = kit_unavailable()
    if why:
        print(f"python -m axle.testing: {why}", file=sys.stderr)
        return 2
    import pytest

    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0].startswith("-"):
        print(f"usage: {USAGE}", file=sys.stderr)
        return 2
    target, rest = args[0], _kit_options(args[1:])
    return int(pytest.main([SUITE, "-p", "axle.testing.plugin", "-p", "no:cacheprovider", "-q",
                            "--axle-backend", target, *rest,
                            # axle is imported already (this module is part of it): nothing to rewrite
                            "-W", "ignore::pytest.PytestAssertRewriteWarning"]))


if __name__ == "__main__":
    sys.exit(main())
