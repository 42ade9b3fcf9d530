"""The planner's storage quantities agree with the Kubernetes client's own parser.

The pure core may not import the ``kubernetes`` package (its import fence: the package brings the API client), so
``spec.quantity_bytes`` is a small parser of its own for the forms a volume size takes. Here the client library is
the oracle: for every size the spec accepts, both give the same number of bytes, and what the spec refuses is
either refused by the library too or a form no storage size uses (milli-units, exponents, a sign, a space)."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kubernetes.utils import parse_quantity

from ozone_scm_operator.spec import quantity_bytes

SUFFIXES = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "k", "M", "G", "T", "P", "E"]


@given(
    whole=st.integers(min_value=0, max_value=10**6),
    fraction=st.one_of(st.none(), st.integers(min_value=0, max_value=999)),
    suffix=st.sampled_from(SUFFIXES),
)
def test_every_size_the_spec_reads_is_the_number_the_kubernetes_client_reads(
    whole: int, fraction: int | None, suffix: str
) -> None:
    text = f"{whole}{'' if fraction is None else f'.{fraction:03d}'}{suffix}"
    ours = quantity_bytes(text)
    theirs = parse_quantity(text)
    assert Decimal(ours.numerator) / Decimal(ours.denominator) == theirs, text


@pytest.mark.parametrize("text", ["10GB", "1.5.0Gi", "Gi", "0x10", ""])
def test_what_neither_reads(text: str) -> None:
    with pytest.raises(ValueError):
        quantity_bytes(text)
    with pytest.raises(ValueError):
        parse_quantity(text)


@pytest.mark.parametrize("text", ["100m", "1e3", "1E3", "-1Gi", "10 Gi"])
def test_forms_no_volume_size_uses_are_refused_by_the_spec_only(text: str) -> None:
    parse_quantity(text)  # the library reads them
    with pytest.raises(ValueError):
        quantity_bytes(text)
