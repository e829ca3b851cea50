"""The CPU path's modules that the build compiles with mypyc (``setup.py``).

A compiled module is a C extension made from its Python source, which stays the one
source: the extension gives the same output (``tests/processors/test_native.py``) and the
source runs wherever no extension was built (``DRIPSTREAM_PURE_PYTHON=1``, no C
compiler). An in-place build (``make setup``, an editable install) leaves the extension
beside its source; once the source is edited, the extension is stale and still the one
Python imports, so the checks here say so (``make`` rebuilds it, the test run refuses it).
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
from pathlib import Path

COMPILED_MODULES = (
    "dripstream.processors.extract.simplify",
    "dripstream.processors.label.features",
    "dripstream.processors.extract.markdown",
    "dripstream.processors.extract.page_hints",
    "dripstream.processors.label.templates.signatures",
)


def source_path(module: str) -> Path:
    """The Python source of one of ``COMPILED_MODULES``."""
    package, _, name = module.rpartition(".")
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(f"the {package} package is not importable")
    return Path(next(iter(spec.submodule_search_locations))) / f"{name}.py"


def is_compiled(module: str) -> bool:
    """Whether Python imports ``module`` from an extension rather than its source."""
    origin = getattr(importlib.import_module(module), "__file__", None) or ""
    return origin.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES))


def compiled_modules() -> dict[str, bool]:
    """Each compiled-when-possible module: whether it runs compiled here."""
    return {module: is_compiled(module) for module in COMPILED_MODULES}


def stale_extensions() -> list[str]:
    """Extensions beside their source that are older than it (edited since the build).
    Meaningful in a source tree only: an installed wheel's files share one time."""
    stale = []
    for module in COMPILED_MODULES:
        source = source_path(module)
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            extension = source.with_suffix(suffix)
            if extension.is_file() and extension.stat().st_mtime < source.stat().st_mtime:
                stale.append(f"{extension} is older than {source.name}")
    return stale
