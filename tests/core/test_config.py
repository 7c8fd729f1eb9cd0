from __future__ import annotations

import pytest

from axle.config import Config
from axle.errors import AxleError


def test_flags_parse():
    c = Config()
    c.load_flags("--jit_level=auto --no_optimize --dump_to=/tmp/x --cpu_threads=2 --strict_placement")
    assert c.jit_level == "auto" and c.optimize is False and c.dump_to == "/tmp/x" and c.strict_placement
    assert c.backend_flags == {"cpu_threads": "2"}


def test_bad_flags():
    c = Config()
    with pytest.raises(AxleError, match="unknown flag --frob"):
        c.load_flags("--frob")
    with pytest.raises(AxleError, match="jit_level"):
        c.update(jit_level="sometimes")
    with pytest.raises(AxleError, match="unknown axle setting"):
        c.update(nope=1)
