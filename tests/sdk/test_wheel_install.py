"""`axle new-backend acme` works in a fresh virtual environment holding wheels only (issue 13).

What this proves: axle installed from a WHEEL (not editable; no source checkout on
``sys.path``; every command run from a temporary folder) finds the backend template it
ships as package data, scaffolds ``acme``, that scaffold builds as a wheel and installs
(not editable), and the conformance kit passes on ``acme:0``.

How, without a network:
- axle's sdist is built from a copy of the sources it needs, and axle's wheel from that
  sdist (``pip wheel --no-deps --no-build-isolation --no-index``, with this environment's
  setuptools), so both the sdist and the wheel are shown to carry the template.
- The fresh environment is ``python -m venv --without-pip``; packages go in with this
  environment's pip (``pip --python VENV/bin/python install --no-index --find-links
  WHEELHOUSE``), which resolves dependencies against the fresh environment only.
- numpy and ml_dtypes (and, for the kit, pytest with its dependencies) cannot be downloaded and a wheel
  of an installed package cannot be rebuilt, so the fresh environment sees this
  environment's copies through a ``.pth`` file naming a folder that links exactly those
  distributions (their packages and ``*.dist-info``, so pip counts them as installed). No
  axle file is in that folder: whatever axle code runs comes from the wheels.
- Before pytest is made visible, ``python -m axle.testing acme`` must say how to get it
  (``pip install 'axle[kit]'``) instead of a ModuleNotFoundError traceback.
"""
from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import sys
import tarfile
import warnings
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from setuptools.config.pyprojecttoml import apply_configuration
from setuptools.dist import Distribution

from axle.scaffold import ARTEFACTS

ROOT = Path(__file__).resolve().parents[2]
#: what axle's sdist is built from (the rest of the checkout is not part of the core)
CORE_SOURCES = ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "core", "backends/template")
JUNK = shutil.ignore_patterns(*ARTEFACTS)
#: every distribution of the repository
PYPROJECTS = sorted([ROOT / "pyproject.toml", *ROOT.glob("backends/*/pyproject.toml")])
TIMEOUT = 300


def run(argv: list[str | Path], cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in argv], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=TIMEOUT)


def ok(r: subprocess.CompletedProcess) -> str:
    assert r.returncode == 0, f"{r.args} exited {r.returncode}\n{r.stdout}\n{r.stderr}"
    return r.stdout


def build_core_wheel(tmp: Path, wheelhouse: Path) -> Path:
    """axle's wheel, built from axle's sdist, built from a copy of the sources."""
    src = tmp / "src"
    for rel in CORE_SOURCES:
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        if (ROOT / rel).is_dir():
            shutil.copytree(ROOT / rel, src / rel, ignore=JUNK)
        else:
            shutil.copy2(ROOT / rel, src / rel)
    sdists = tmp / "sdist"
    built = run([sys.executable, "-c", "import sys; from setuptools import build_meta as b; "
                                       "print(b.build_sdist(sys.argv[1]))", sdists], cwd=src)
    name = ok(built).split()[-1]
    assert "Deprecat" not in built.stderr, built.stderr  # e.g. the `project.license` table banner
    with tarfile.open(sdists / name) as tar:
        tar.extractall(sdists, filter="data")
    unpacked = sdists / name.removesuffix(".tar.gz")
    assert (unpacked / "backends" / "template" / "pyproject.toml").is_file(), "the sdist lacks the template"
    pip_wheel(unpacked, wheelhouse, tmp)
    (wheel,) = wheelhouse.glob("axle-*.whl")
    return wheel


def pip_wheel(project: Path, wheelhouse: Path, cwd: Path) -> None:
    ok(run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "--no-index",
            "-w", wheelhouse, project], cwd=cwd))


def pip_install(venv_python: Path, wheelhouse: Path, name: str, cwd: Path) -> None:
    ok(run([sys.executable, "-m", "pip", "--python", venv_python, "install", "-q", "--no-index",
            "--find-links", wheelhouse, name], cwd=cwd))


def closure(names: list[str]) -> set[str]:
    """The distributions ``names`` need at run time (no extras), themselves included."""
    seen: set[str] = set()
    todo = list(names)
    while todo:
        dist = importlib.metadata.distribution(todo.pop())
        key = dist.metadata["Name"].lower()
        if key in seen:
            continue
        seen.add(key)
        for text in dist.requires or []:
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return seen


def share(dists: set[str], folder: Path, site: Path, pth: str) -> None:
    """Makes this environment's installed ``dists`` (not axle) visible to the fresh one:
    links of their top-level files and dist-info in ``folder``, named by a .pth file."""
    assert not any(d.startswith("axle") for d in dists)
    folder.mkdir(parents=True, exist_ok=True)
    for name in dists:
        dist = importlib.metadata.distribution(name)
        home = Path(str(dist.locate_file("")))
        tops = {Path(str(f)).parts[0] for f in dist.files or []} - {"..", "__pycache__"}
        for top in tops:
            if not (folder / top).exists():
                (folder / top).symlink_to(home / top)
    (site / pth).write_text(f"{folder}\n")


def test_new_backend_from_wheels_in_a_fresh_venv(tmp_path):
    wheelhouse, work = tmp_path / "wheels", tmp_path / "work"
    work.mkdir()
    build_core_wheel(tmp_path, wheelhouse)
    venv = tmp_path / "venv"
    ok(run([sys.executable, "-m", "venv", "--without-pip", venv], cwd=work))
    python = venv / "bin" / "python"
    site = Path(ok(run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd=work)).strip())
    # axle's run-time dependencies: numpy, and ml_dtypes for bfloat16
    share(closure(["numpy", "ml_dtypes"]), tmp_path / "shared-numpy", site, "shared_numpy.pth")
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV") and not k.startswith("AXLE_")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"

    pip_install(python, wheelhouse, "axle", work)
    where = ok(run([python, "-c", "import axle, axle.scaffold as s; print(axle.__file__); print(s.template_dir())"],
                   cwd=work, env=env)).split()
    assert all(Path(w).is_relative_to(site) for w in where), where  # the wheel's files, not the checkout's

    taken = run([venv / "bin" / "axle", "new-backend", "interpreter", work / "x"], cwd=work, env=env)
    assert taken.returncode != 0 and "already used by an installed backend" in taken.stderr, taken.stderr
    assert "Traceback" not in taken.stderr and not (work / "x").exists()

    ok(run([venv / "bin" / "axle", "new-backend", "acme", work / "axle-acme"], cwd=work, env=env))
    pip_wheel(work / "axle-acme", wheelhouse, work)
    pip_install(python, wheelhouse, "axle-acme", work)
    assert "acme:0" in ok(run([venv / "bin" / "axle", "devices"], cwd=work, env=env))

    no_kit = run([python, "-m", "axle.testing", "acme", "--quick"], cwd=work, env=env)
    assert no_kit.returncode != 0 and "pip install 'axle[kit]'" in no_kit.stderr, no_kit.stderr
    assert "Traceback" not in no_kit.stderr
    doctor = run([venv / "bin" / "axle", "doctor"], cwd=work, env=env)  # needs no kit extra
    assert doctor.returncode == 0 and "acme" in doctor.stdout, doctor.stdout + doctor.stderr

    share(closure(["pytest"]), tmp_path / "shared-pytest", site, "shared_pytest.pth")
    kit = run([python, "-m", "axle.testing", "acme", "--quick"], cwd=work, env=env)
    assert kit.returncode == 0 and " passed" in kit.stdout, kit.stdout + kit.stderr


@pytest.mark.parametrize("pyproject", PYPROJECTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_pyproject_license_is_an_spdx_string(pyproject):
    """A `project.license` table makes setuptools print a deprecation banner on every
    install; an SPDX expression string does not."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        dist = apply_configuration(Distribution(), pyproject)
    assert dist.metadata.license_expression == "Apache-2.0"
    assert not [str(w.message) for w in caught if "license" in str(w.message).lower()]
