"""The `make lint` check that every suppression says why: a `# noqa: CODE` must be followed
by ` - reason` and a `# type: ignore[code]` by `  # reason`, as in

    except Exception as e:  # noqa: BLE001 - a broken plugin must not break the others
    __hash__ = None  # type: ignore[assignment]  # == is elementwise, as in NumPy

ruff (PGH004, RUF100) and mypy (ignore-without-code, warn_unused_ignores) already reject
blanket, unused and code-less suppressions; neither asks for a reason, hence this check.

    .venv/bin/python tools/check_suppressions.py core/axle backends/cpu/axle_cpu ...

Prints each suppression without a reason as FILE:LINE: text; exit status 1 when there is any."""
from __future__ import annotations

import io
import sys
import tokenize
from collections.abc import Iterator
from pathlib import Path

# a code list, then a reason: "noqa: A001, B008 - why" / "type: ignore[a, b]  # why"
_NOQA = "noqa"
_IGNORE = "type: ignore"


def _has_reason(comment: str) -> bool:
    """``comment`` (one `#` comment, without the `#`) gives a reason after its codes."""
    text = comment.strip()
    if text.startswith(_NOQA):
        _, sep, reason = text.partition(" - ")
        return bool(sep and reason.strip())
    if text.startswith(_IGNORE):
        _, sep, reason = text.partition("]")
        return bool(sep and reason.strip().lstrip("#").strip())
    return True


def findings(path: Path) -> Iterator[tuple[int, str]]:
    """(line, comment) of each suppression comment of one file that gives no reason."""
    source = path.read_text(encoding="utf-8")
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type != tokenize.COMMENT:
            continue
        # "# type: ignore[x]  # why" is one comment token: split at the first '#' only
        comment = tok.string[1:]
        if not _has_reason(comment):
            yield tok.start[0], tok.string


def main(argv: list[str]) -> int:
    bad = 0
    for root in argv:
        files = sorted(Path(root).rglob("*.py")) if Path(root).is_dir() else [Path(root)]
        for f in files:
            for line, text in findings(f):
                print(f"{f}:{line}: suppression without a reason: {text}")
                bad += 1
    if bad:
        print(f"{bad} suppression(s) without a reason: write why after it "
              "('# noqa: CODE - why', '# type: ignore[code]  # why')")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
