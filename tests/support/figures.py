"""Figures compared as a reader sees them: every property equal, numbers within float
rounding (a sum in SQL adds in another order than pandas did: ~1e-14 apart)."""

from __future__ import annotations

import base64

import numpy as np


def _array(v):
    """A typed array as plotly encodes it (``{"dtype", "bdata"[, "shape"]}``) decoded."""
    if isinstance(v, dict) and {"dtype", "bdata"} <= v.keys():
        out = np.frombuffer(base64.b64decode(v["bdata"]), dtype=v["dtype"])
        shape = v.get("shape")
        return out.reshape([int(n) for n in str(shape).split(",")]) if shape else out
    return v


def _same(a, b, path: str) -> None:
    a, b = _array(a), _array(b)
    if isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), path
        for k in a:
            _same(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, np.ndarray) and a.dtype.kind in "fiu":
        np.testing.assert_allclose(a, np.asarray(b), rtol=1e-12, err_msg=path)
    elif isinstance(a, (list, tuple, np.ndarray)):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _same(x, y, f"{path}[{i}]")
    elif isinstance(a, float):
        assert np.isclose(a, b, rtol=1e-12, atol=0), path
    else:
        assert a == b, f"{path}: {a!r} != {b!r}"


def assert_same_figure(got, want) -> None:
    """``got`` and ``want`` (plotly figures) draw the same: AssertionError naming the
    first property that differs."""
    _same(got.to_dict(), want.to_dict(), "figure")
