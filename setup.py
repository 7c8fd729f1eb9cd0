"""Build step the pyproject.toml cannot express: the backend template ships in the wheel.

``axle new-backend NAME`` copies backends/template (the distribution axle-template). So
that it works from an installed wheel, the core's build copies that folder, whatever files
it holds minus build artefacts, into the wheel as package data under ``axle/_template``.
backends/template stays the one source of truth: nothing is copied in git. The sdist
carries the folder through MANIFEST.in, so a wheel built from the sdist has it too.
Editable installs skip the copy: ``axle.scaffold.template_dir()`` then finds the checkout.
"""
from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

TEMPLATE = Path(__file__).resolve().parent / "backends" / "template"
#: what never belongs in the copy (kept in step with axle.scaffold's own skip list)
ARTEFACTS = ("__pycache__", "*.pyc", "*.pyo", "*.so", "*.o", "*.egg-info", "build", "dist", ".pytest_cache")


class BuildWithTemplate(build_py):
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return
        if not (TEMPLATE / "pyproject.toml").is_file():
            raise SystemExit(f"axle build: the backend template is missing at {TEMPLATE}; "
                             f"build from a checkout or from an sdist that includes backends/template")
        out = Path(self.build_lib) / "axle" / "_template"
        if out.exists():
            shutil.rmtree(out)
        shutil.copytree(TEMPLATE, out, ignore=shutil.ignore_patterns(*ARTEFACTS))


setup(cmdclass={"build_py": BuildWithTemplate})
