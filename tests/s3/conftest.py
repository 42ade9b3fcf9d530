"""The object-storage tier (``make s3-test``): one real radosgw (tests/s3/radosgw.py) for the whole session."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from minio import Minio

from scm_server.client.object_store import S3Settings, make_client
from tests.s3.radosgw import S3Server, radosgw


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    started = time.monotonic()
    with radosgw(Path(tmp_path_factory.mktemp("radosgw"))) as server:
        print(f"\nradosgw (mon + memstore OSD + gateway) up at {server.endpoint} in "
              f"{time.monotonic() - started:.1f}s", flush=True)
        yield server


@pytest.fixture(scope="session")
def s3_admin(s3_server: S3Server) -> Minio:
    """A client of the test user (for setting up buckets and looking at what the CLI stored)."""
    return make_client(S3Settings.from_env(None, None, s3_server.env()))
