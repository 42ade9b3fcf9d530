"""Fixtures of the node tier: one real single-node cluster (``cluster.Node``: control plane, kubelet, containerd,
kube-proxy, CoreDNS) for the whole session, and the project's image loaded into its containerd once.

``OZONE_SCM_NODE_LIST=ci`` (``make e2e-node``) deselects the scenarios outside ``test_node_scenarios.CI_SCENARIOS``
(pytest reports how many); unset, or ``all``, runs the whole list."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.node.cluster import Node, NodeError, cgroup_mounts
from tests.e2e.node.node_env import AUDIT_IMAGE, SCM_IMAGE, TAGS


@pytest.fixture(scope="session")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    n = Node(tmp_path_factory.mktemp("node"))
    with n:
        yield n
    # everything the tier made is gone: its network namespace (with the veth pair) and its cgroups
    assert not Path(f"/run/netns/{n.netns}").exists(), f"network namespace {n.netns} left behind"
    left = [m / n.cgroup for m in cgroup_mounts() if (m / n.cgroup).exists()]
    assert not left, f"cgroups left behind: {left}"


@pytest.fixture(scope="session")
def scm_image(node: Node) -> str:
    """The project's image (``make image``) in the node's containerd under the tags the tests name."""
    return _load(node, SCM_IMAGE)


@pytest.fixture(scope="session")
def audit_image(node: Node) -> str:
    """The audit image (``make audit-image``) in the node's containerd under the tag the scenarios name."""
    return _load(node, AUDIT_IMAGE)


def _load(node: Node, image: str) -> str:
    try:
        node.import_podman_image(image, also_as=[f"docker.io/library/{t}" for t in TAGS[image]])
    except NodeError as exc:
        raise AssertionError(f"{image} could not be loaded into the node (build it with `make image` and "
                             f"`make audit-image`): {exc}") from None
    return TAGS[image][0]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    choice = os.environ.get("OZONE_SCM_NODE_LIST", "all")
    if choice not in ("all", "ci"):
        raise pytest.UsageError(f"OZONE_SCM_NODE_LIST={choice!r}: use `ci` (the CI subset) or `all` (every scenario)")
    if choice == "all":
        return
    from tests.e2e.node.test_node_scenarios import CI_SCENARIOS

    def outside(item: pytest.Item) -> bool:
        callspec = getattr(item, "callspec", None)
        return (item.originalname == "test_scenario_on_the_node"  # type: ignore[attr-defined]
                and callspec is not None and callspec.params.get("name") not in CI_SCENARIOS)

    dropped = [i for i in items if outside(i)]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [i for i in items if not outside(i)]
