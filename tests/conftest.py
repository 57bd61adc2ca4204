"""Shared test configuration.

Hypothesis profiles for the property-based tests of the parsers (marker ``property``):
``default`` runs a bounded number of examples so ``make test`` stays quick; ``fuzz``
(``HYPOTHESIS_PROFILE=fuzz``, what ``make fuzz`` sets) runs many more. Tests use
``@settings`` only for what differs from the profile, never ``max_examples``.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "default", max_examples=60, deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "fuzz", max_examples=5_000, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


def pytest_collection_modifyitems(items):
    """Every hypothesis test carries the marker ``property`` (what ``make fuzz`` selects),
    also where its module forgot to set it."""
    import pytest

    for item in items:
        if getattr(getattr(item, "obj", None), "is_hypothesis_test", False):
            item.add_marker(pytest.mark.property)
