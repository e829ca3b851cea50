"""A trained LightGBM model for prediction only, called through LightGBM's C library.

The ``lightgbm`` Python package imports SciPy, and pandas and pyarrow when they are
installed; prediction needs none of that, so the labeller loads the shared library that the
package ships (``lib_lightgbm``, found without importing the package) and calls the two
functions it needs, ``LGBM_BoosterLoadModelFromString`` and
``LGBM_BoosterPredictForMat``: the same calls ``lightgbm.Booster.predict`` makes, with
the same results. The matrix is any float buffer (the labeller's is an ``array``), so
serving imports no numpy either. Training (``dripstream.processors.training.train``) still
uses the Python package.
"""

from __future__ import annotations

import ctypes
import importlib.util
from functools import lru_cache
from pathlib import Path
from typing import Any

Buffer = Any  # an object with the buffer protocol (typing.Buffer from Python 3.12)
_DTYPES = {"f": 0, "d": 1}  # C_API_DTYPE_FLOAT32 / 64, by buffer format
_ROW_MAJOR = 1
_PREDICT_NORMAL = 0  # probabilities, for a binary objective
_ALL_ITERATIONS = -1


class BoosterError(RuntimeError):
    """The LightGBM library refused a model or a prediction."""


@lru_cache(maxsize=1)
def _library() -> ctypes.CDLL:
    spec = importlib.util.find_spec("lightgbm")
    if spec is None or not spec.submodule_search_locations:
        raise BoosterError("the lightgbm package is not installed")
    package = Path(next(iter(spec.submodule_search_locations)))
    for candidate in (package / "lib", package / "bin", package.parent):
        for name in ("lib_lightgbm.so", "lib_lightgbm.dylib", "lib_lightgbm.dll"):
            if (candidate / name).is_file():
                library = ctypes.cdll.LoadLibrary(str(candidate / name))
                library.LGBM_GetLastError.restype = ctypes.c_char_p
                return library
    raise BoosterError(f"no lib_lightgbm library under {package}")


def _check(status: int) -> None:
    if status != 0:
        raise BoosterError(_library().LGBM_GetLastError().decode("utf-8", "replace"))


class Booster:
    """A LightGBM model from its text form (``lightgbm.Booster.model_to_string``)."""

    def __init__(self, model: str) -> None:
        self.model = model
        self._handle = ctypes.c_void_p()
        iterations = ctypes.c_int(0)
        _check(
            _library().LGBM_BoosterLoadModelFromString(
                ctypes.c_char_p(model.encode("utf-8")),
                ctypes.byref(iterations),
                ctypes.byref(self._handle),
            )
        )

    def predict(self, matrix: Buffer, columns: int) -> list[float]:
        """The model's output (a probability, for a binary model) for every row of
        ``matrix``: a buffer of float32 or float64 values, row-major, ``columns`` per row
        (an ``array.array``, a numpy array); computed on one thread
        (``num_threads=1``, as the labeller always predicted)."""
        view = memoryview(matrix)
        dtype = _DTYPES.get(view.format)
        if dtype is None:
            raise BoosterError(f"a float32 or float64 matrix is needed, not {view.format!r}")
        values = view.nbytes // view.itemsize
        rows = values // columns if columns > 0 else 0
        if columns <= 0 or rows * columns != values:
            raise BoosterError(f"{values} values are not rows of {columns}")
        if rows == 0:
            return []
        # a copy in C order (a strided view too): LightGBM reads it, nobody writes it
        data = (ctypes.c_char * view.nbytes).from_buffer_copy(
            view if view.c_contiguous else view.tobytes()
        )
        out = (ctypes.c_double * rows)()
        written = ctypes.c_int64(0)
        _check(
            _library().LGBM_BoosterPredictForMat(
                self._handle,
                data,
                ctypes.c_int(dtype),
                ctypes.c_int32(rows),
                ctypes.c_int32(columns),
                ctypes.c_int(_ROW_MAJOR),
                ctypes.c_int(_PREDICT_NORMAL),
                ctypes.c_int(0),
                ctypes.c_int(_ALL_ITERATIONS),
                ctypes.c_char_p(b"num_threads=1"),
                ctypes.byref(written),
                out,
            )
        )
        if written.value != rows:
            raise BoosterError(f"{written.value} predictions for {rows} rows")
        return list(out)

    def __del__(self) -> None:
        if getattr(self, "_handle", None) and self._handle.value:
            _library().LGBM_BoosterFree(self._handle)
