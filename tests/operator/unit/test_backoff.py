"""The reconcile loop's wait after failed passes (``backoff.Backoff``): it grows, it is jittered within known
bounds, it is capped, and a ``Retry-After`` from the API server (429 Too Many Requests) is a floor."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ozone_scm_operator.backoff import Backoff

B = Backoff(base=1.0, cap=30.0)


def test_the_wait_doubles_with_each_failure_until_the_cap() -> None:
    # the draw 0.999... gives (almost) the ceiling, 0 gives half of it
    assert [B.delay(n, 0.0) for n in range(1, 8)] == [0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 15.0]
    assert B.delay(40, 0.0) == 15.0 and B.delay(10**6, 0.0) == 15.0  # no overflow however long it fails


@given(failures=st.integers(min_value=1, max_value=200), draw=st.floats(min_value=0.0, max_value=1.0, exclude_max=True))
def test_every_wait_lies_between_half_the_ceiling_and_the_ceiling(failures: int, draw: float) -> None:
    ceiling = min(30.0, 2.0 ** (failures - 1))
    assert ceiling / 2 <= B.delay(failures, draw) <= ceiling


def test_two_operators_that_failed_together_do_not_retry_together() -> None:
    assert B.delay(5, 0.1) != B.delay(5, 0.9)


def test_retry_after_is_a_floor_never_a_ceiling() -> None:
    assert B.delay(1, 0.5, retry_after=7.0) == 7.0  # the server asked for longer than the back-off
    assert B.delay(6, 0.5, retry_after=2.0) == B.delay(6, 0.5)  # the back-off is already longer
    assert B.delay(1, 0.5, retry_after=None) == 0.75


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"base": 0.0}, "0 < base <= cap"), ({"base": 5.0, "cap": 1.0}, "0 < base <= cap"),
])
def test_bad_settings_are_refused(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Backoff(**kwargs)


@pytest.mark.parametrize(("failures", "draw"), [(0, 0.5), (1, 1.0), (1, -0.1)])
def test_bad_arguments_are_refused(failures: int, draw: float) -> None:
    with pytest.raises(ValueError):
        B.delay(failures, draw)
