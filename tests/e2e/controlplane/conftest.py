"""Fixtures of the control-plane tier: one real control plane (etcd, kube-apiserver, kube-controller-manager built
by ``make k8s-control-plane``) for the whole session; each test gets its own namespace on it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.e2e.controlplane.fixture import ControlPlane


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    with ControlPlane(tmp_path_factory.mktemp("control-plane")) as cp:
        yield cp
