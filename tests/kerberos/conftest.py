"""The Kerberos tier's shared fixture: one real MIT KDC per test module, its krb5.conf in the environment."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.kerberos.kdc import MiniKdc


@pytest.fixture(scope="module")
def kdc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MiniKdc]:
    kdc = MiniKdc.start(tmp_path_factory.mktemp("kdc"))
    saved = {k: os.environ.get(k) for k in kdc.env()}
    os.environ.update(kdc.env())
    try:
        yield kdc
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        kdc.stop()
