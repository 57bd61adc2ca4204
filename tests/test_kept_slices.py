"""kept_hours.in_slices: a slice of a kept table's refresh that runs out of DuckDB's
memory is computed again in halves (issue 17: at 24,576 GPUs a 6-hour slice of the usage
table did not fit in the service's 512 MiB, and every refresh failed)."""

from __future__ import annotations

from datetime import datetime, timedelta

import duckdb
import pytest
from hypothesis import given
from hypothesis import strategies as st

from warehouse import kept_hours

H = timedelta(hours=1)
T = datetime(2026, 11, 2)


def _computer(fits: timedelta):
    """A compute(a, b) that runs out of memory on slices longer than ``fits`` (DuckDB's
    own exception, as a slice over its memory_limit raises) and records the others."""
    done, tried = [], []

    def compute(a, b):
        tried.append((a, b))
        if b - a > fits:
            raise duckdb.OutOfMemoryException("Out of Memory Error: failed to pin block")
        done.append((a, b))

    return compute, done, tried


@given(hours=st.integers(1, 60), step=st.integers(1, 30), fits=st.integers(1, 30))
def test_every_hour_is_computed_once_in_slices_that_fit(hours, step, fits):
    compute, done, _ = _computer(fits * H)
    kept_hours.in_slices(T, T + hours * H, step * H, compute)
    assert all(b - a <= min(step, fits) * H and a < b for a, b in done)
    assert [a for a, _ in done] == sorted(a for a, _ in done)  # in order, the oldest first
    covered = [a + k * H for a, b in done for k in range((b - a) // H)]
    assert covered == [T + k * H for k in range(hours)]  # each hour once


def test_an_hour_that_does_not_fit_raises_and_the_earlier_slices_stay():
    def compute(a, b):
        if a <= T + 7 * H < b:  # the hour 7 alone is over the limit
            raise duckdb.OutOfMemoryException("Out of Memory Error")
        done.append((a, b))

    done = []
    with pytest.raises(duckdb.OutOfMemoryException):
        kept_hours.in_slices(T, T + 12 * H, 6 * H, compute)
    assert done == [(T, T + 6 * H), (T + 6 * H, T + 7 * H)]


def test_other_errors_are_not_retried():
    calls = []

    def compute(a, b):
        calls.append((a, b))
        raise duckdb.CatalogException("no such table")

    with pytest.raises(duckdb.CatalogException):
        kept_hours.in_slices(T, T + 6 * H, 6 * H, compute)
    assert calls == [(T, T + 6 * H)]
