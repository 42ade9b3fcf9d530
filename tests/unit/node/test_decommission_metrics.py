"""The NodeDecommissionMetrics bean and JMX object-name matching (pure)."""

from __future__ import annotations

import json

import pytest

from scm_server.node.decommission_metrics import (
    BEAN_NAME,
    NodeDecommissionProgress,
    node_decommission_bean,
    object_name_matches,
    query_beans,
)


@pytest.mark.parametrize(
    ("pattern", "matches"),
    [
        (BEAN_NAME, True),
        ("Hadoop:name=NodeDecommissionMetrics,service=StorageContainerManager", True),  # key order is free
        ("Hadoop:service=StorageContainerManager,name=*", True),
        ("Hadoop:service=StorageContainerManager,*", True),
        ("*:*", True),
        ("Hadoop:service=StorageContainerManager", False),  # a missing key without ",*" does not match
        ("Hadoop:service=OzoneManager,name=*", False),
        ("Other:service=StorageContainerManager,name=NodeDecommissionMetrics", False),
        ("Hadoop:service=StorageContainerManager,name=Node?ecommissionMetrics", True),
    ],
)
def test_object_name_patterns(pattern: str, matches: bool) -> None:
    assert object_name_matches(pattern, BEAN_NAME) is matches


def test_bean_totals_and_per_node_records() -> None:
    nodes = [
        NodeDecommissionProgress("dn1", 2, (5, 6), (7,), 3, 1000),
        NodeDecommissionProgress("dn2", 0, (), (8, 9), 1, 2000),
    ]
    bean = node_decommission_bean(nodes)
    assert bean["DecommissioningMaintenanceNodesTotal"] == 2
    assert (bean["ContainersUnderReplicatedTotal"], bean["ContainersUnClosedTotal"]) == (2, 3)
    assert (bean["PipelinesWaitingToCloseTotal"], bean["ContainersSufficientlyReplicatedTotal"]) == (2, 4)
    assert [bean[f"tag.datanode.{i}"] for i in (1, 2)] == ["dn1", "dn2"]
    assert [bean[f"UnclosedContainersDN.{i}"] for i in (1, 2)] == [1, 2]
    assert [bean[f"StartTimeDN.{i}"] for i in (1, 2)] == [1000, 2000]
    assert json.loads(query_beans("", [bean]))["beans"] == [bean]
    assert json.loads(query_beans("Hadoop:service=OzoneManager,*", [bean])) == {"beans": []}
