"""Findings of the on-disk caches' audit (tests/core/test_diskcache.py has the rules): code
versions that see a rewritten file, the --compile_cache directory itself private, and a
cache that cannot be written (read-only, full) degrading with one warning."""
from __future__ import annotations

import os

from axle.diskcache import code_version


def test_code_version_changes_when_new_code_keeps_the_size_and_time(tmp_path) -> None:
    # a reinstall from a reproducible build (SOURCE_DATE_EPOCH, a Nix store: every file at one
    # fixed time) or a copy with cp -p gives new code of the same size the old time
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    src = pkg / "passes.py"
    src.write_text("SIGN = +1\n")
    st = os.stat(src)
    before = code_version.__wrapped__(str(pkg))
    new = pkg / "passes.py.new"
    new.write_text("SIGN = -1\n")
    os.replace(new, src)
    os.utime(src, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert os.stat(src).st_size == st.st_size and os.stat(src).st_mtime_ns == st.st_mtime_ns
    assert code_version.__wrapped__(str(pkg)) != before
    assert code_version.__wrapped__(str(pkg)) == code_version.__wrapped__(str(pkg))  # stable while untouched
