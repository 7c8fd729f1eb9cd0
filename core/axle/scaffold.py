"""``axle new-backend NAME [DIR]``: a copy of the template backend, every name changed.

The copy is a complete distribution (``axle-NAME``, package ``axle_NAME``, entry point
``NAME``) that passes the conformance kit as soon as it is installed with
``pip install -e DIR``; its README is the tutorial for turning it into a real device.

The template is backends/template of the source checkout; an installed axle wheel carries
a copy of it as package data (``axle/_template``, made by the build in setup.py).
"""
from __future__ import annotations

import keyword
import re
import shutil
from pathlib import Path

from .errors import ArgumentError, AxleError
from .registry import installed_names

_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
#: build artefacts never copied (setup.py's ARTEFACTS, a test keeps the two equal)
ARTEFACTS = ("__pycache__", "*.pyc", "*.pyo", "*.so", "*.o", "*.egg-info", "build", "dist", ".pytest_cache")
_SKIP = shutil.ignore_patterns(*ARTEFACTS)
#: where an installed wheel keeps the template (package data, see setup.py)
PACKAGED = Path(__file__).resolve().parent / "_template"
#: the template of the source checkout axle runs from (editable installs, tests)
CHECKOUT = Path(__file__).resolve().parents[2] / "backends" / "template"


def template_dir() -> Path:
    """The template's source tree: the copy shipped in the axle wheel, or backends/template
    of the source checkout axle runs from."""
    for c in (PACKAGED, CHECKOUT):
        if (c / "pyproject.toml").is_file() and (c / "axle_template").is_dir():
            return c
    raise AxleError(f"cannot find the backend template: neither {PACKAGED} (in an axle wheel) nor {CHECKOUT} "
                    f"(a source checkout) holds it; reinstall axle from a wheel or an sdist built by its "
                    f"setup.py, or run axle from a source checkout")


def renames(name: str) -> list[tuple[str, str]]:
    """(regex, replacement) pairs turning the template's names into NAME's."""
    camel = "".join(part.capitalize() for part in name.split("_"))
    return [
        (r"axle_template", f"axle_{name}"),
        (r"axle-template", f"axle-{name}"),
        (r"\bTemplate(?=[A-Z])", camel),
        (r'name = "template"', f'name = "{name}"'),
        (r'^template = "', f'{name} = "'),
        (r"\btemplate(?=:\d|:INDEX|_claim_all)", name),
        (r"AXLE_TEMPLATE", f"AXLE_{name.upper()}"),
        (r"\(template backend\)", f"({name} backend)"),
    ]


def check_name(name: str) -> None:
    """Refuses a name that is not a valid package suffix, or that an installed backend uses
    (two entry points with one name: the registry would load only one of them)."""
    if not _NAME.match(name) or keyword.iskeyword(name):
        raise ArgumentError(f"backend name {name!r} must be lowercase letters, digits and '_', starting with a "
                            f"letter (it becomes the device prefix {name}:0 and the package axle_{name})")
    taken = installed_names()
    if name in taken:
        raise ArgumentError(f"backend name {name!r} is already used by an installed backend (installed: "
                            f"{', '.join(taken)}); choose another name, or uninstall that backend first")


def new_backend(name: str, dest: str | Path | None = None) -> Path:
    """Creates the backend NAME in ``dest`` (default ./axle-NAME); returns the folder."""
    check_name(name)
    src = template_dir()
    out = Path(dest) if dest is not None else Path.cwd() / f"axle-{name}"
    if out.exists() and any(out.iterdir()):
        raise AxleError(f"{out} exists and is not empty; choose another folder")
    out.mkdir(parents=True, exist_ok=True)
    shutil.copytree(src, out, ignore=_SKIP, dirs_exist_ok=True)
    (out / "axle_template").rename(out / f"axle_{name}")
    rules = renames(name)
    for path in sorted(out.rglob("*")):
        if path.is_file() and path.suffix in (".py", ".toml", ".md", ".txt", ".cfg"):
            text = path.read_text()
            for pattern, repl in rules:
                text = re.sub(pattern, repl, text, flags=re.MULTILINE)
            path.write_text(text)
    return out
