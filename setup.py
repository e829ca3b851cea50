"""The build: one import name, and the CPU path's hot modules compiled.

**One import name.** The design card's top-level folders (``topics``, ``processors``,
``gpu_worker``, ``streams``) are installed as ``dripstream.topics``, ``dripstream.processors``,
... through setuptools' package-dir mapping, so nothing generic lands in site-packages.

**Compiled modules.** mypyc (mypy's compiler) turns the modules in
``dripstream.processors.native.COMPILED_MODULES`` into C extensions. They give the same
output as their Python source, which stays the one source and what runs where no extension
was built: without a C compiler, or when mypy finds a type error in them, the extensions
are left out (the build says so), and ``DRIPSTREAM_PURE_PYTHON=1`` builds none. mypy names
a module by the folders above it, so the sources are staged under ``build/mypyc-src/dripstream``
to give the extensions their installed names. The tests check that a normal build compiled
them all.
"""

import importlib.util
import os
import shutil
from pathlib import Path

from setuptools import find_packages, setup

ROOT = Path(__file__).resolve().parent
PARTS = ("topics", "processors", "gpu_worker", "streams")
STAGE = Path("build") / "mypyc-src"


def packages() -> tuple[list[str], dict[str, str]]:
    names = ["dripstream"]
    folders = {"dripstream": "dripstream"}
    for part in PARTS:
        names.append(f"dripstream.{part}")
        names += [f"dripstream.{part}.{name}" for name in find_packages(str(ROOT / part))]
        folders[f"dripstream.{part}"] = part
    return names, folders


def extensions() -> list:
    if os.environ.get("DRIPSTREAM_PURE_PYTHON") == "1":
        return []
    from mypyc.build import mypycify

    # The list, read without importing the package (not installed yet).
    spec = importlib.util.spec_from_file_location("native", ROOT / "processors" / "native.py")
    native = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(native)

    shutil.rmtree(STAGE, ignore_errors=True)
    sources = []
    for module in native.COMPILED_MODULES:
        relative = Path(*module.split(".")[1:]).with_suffix(".py")  # under dripstream/
        staged = STAGE / "dripstream" / relative
        staged.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ROOT / relative, staged)
        for folder in staged.relative_to(STAGE).parents:
            if str(folder) != ".":
                (STAGE / folder / "__init__.py").touch()
        sources.append(str(staged))
    try:
        # What the modules import is type-checked as far as it is installed in the build.
        built = mypycify(
            ["--ignore-missing-imports", *sources], opt_level="3", group_name="dripstream"
        )
    except SystemExit:  # mypy found type errors (printed above): mypyc cannot compile them
        print("dripstream: the modules above do not type-check; installing pure Python")
        return []
    for extension in built:
        extension.optional = True  # a failed compile: a pure-Python install, not a failure
    return built


names, folders = packages()
setup(packages=names, package_dir=folders, ext_modules=extensions())
