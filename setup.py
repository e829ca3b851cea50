"""The build's one step beyond pyproject.toml: the CPU path's hot modules compiled.

mypyc (mypy's compiler) turns the simplifier's walk, the block features, the Markdown
writer and the page hints (``processors.native.COMPILED_MODULES``) into C extensions. They
give the same output as their Python source, which stays the one source and what runs
where no extension was built: without a C compiler, or when mypy finds a type error in
them, the extensions are left out (the build says so), and ``DRIPSTREAM_PURE_PYTHON=1``
builds none. The tests check that a normal build compiled them all.
"""

import os
import sys

from setuptools import setup

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from processors.native import COMPILED_MODULES


def extensions() -> list:
    if os.environ.get("DRIPSTREAM_PURE_PYTHON") == "1":
        return []
    from mypyc.build import mypycify

    sources = [module.replace(".", "/") + ".py" for module in COMPILED_MODULES]
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


setup(ext_modules=extensions())
