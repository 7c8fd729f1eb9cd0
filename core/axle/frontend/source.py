"""Finding the user's source line for error messages."""
from __future__ import annotations

import os
import sys
from typing import Any

_AXLE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def user_frame() -> Any:
    """The innermost frame outside the axle package (None if there is none)."""
    f = sys._getframe(1)
    while f is not None:
        fn = f.f_code.co_filename
        if not fn.startswith(_AXLE_DIR) and not fn.startswith("<frozen"):
            return f
        f = f.f_back
    return None


def user_location() -> str | None:
    """'file.py:12 (fn)' of the innermost frame outside the axle package."""
    f = sys._getframe(1)
    while f is not None:
        fn = f.f_code.co_filename
        if not fn.startswith(_AXLE_DIR) and not fn.startswith("<frozen"):
            return f"{fn}:{f.f_lineno} ({f.f_code.co_name})"
        f = f.f_back
    return None
