"""The HDDS layout features and finalization checkpoints as Ozone 2.2.0 has them (pure values)."""

from __future__ import annotations

import pytest

from scm_server import hdds_layout as layout
from scm_server.hdds_layout import FinalizationCheckpoint as C
from scm_server.hdds_layout import Status
from scm_server.metadata.storage_config import CURRENT_LAYOUT_VERSION


def test_features_are_ozone_2_2_0s_in_order() -> None:
    names = [f.name for f in layout.HDDS_LAYOUT_FEATURES]
    assert names == [
        "INITIAL_VERSION", "DATANODE_SCHEMA_V2", "SCM_HA", "ERASURE_CODED_STORAGE_SUPPORT", "DATANODE_SCHEMA_V3",
        "RATIS_DATASTREAM_PORT_IN_DATANODEDETAILS", "WEBUI_PORTS_IN_DATANODEDETAILS",
        "HADOOP_PRC_PORTS_IN_DATANODEDETAILS", "HBASE_SUPPORT", "WITNESSED_CONTAINER_DB_PROTO_VALUE",
        "STORAGE_SPACE_DISTRIBUTION",
    ]
    assert [f.layout_version for f in layout.HDDS_LAYOUT_FEATURES] == list(range(11))
    assert layout.SOFTWARE_LAYOUT_VERSION == 10
    # a new SCM's VERSION file records the same newest version
    assert CURRENT_LAYOUT_VERSION == layout.SOFTWARE_LAYOUT_VERSION


def test_features_after_ozone_1_4_1s_layout_are_the_ones_to_finalize() -> None:
    # Ozone 1.4.1's newest feature is HADOOP_PRC_PORTS_IN_DATANODEDETAILS (7)
    assert [f.name for f in layout.unfinalized_features(7)] == [
        "HBASE_SUPPORT", "WITNESSED_CONTAINER_DB_PROTO_VALUE", "STORAGE_SPACE_DISTRIBUTION"]
    assert layout.unfinalized_features(10) == []
    with pytest.raises(ValueError, match=r"unknown HDDS layout version 11: this software knows 0\.\.10"):
        layout.feature(11)


@pytest.mark.parametrize(("mark", "behind", "checkpoint", "status"), [
    (False, True, C.FINALIZATION_REQUIRED, Status.FINALIZATION_REQUIRED),
    (True, True, C.FINALIZATION_STARTED, Status.FINALIZATION_IN_PROGRESS),
    (True, False, C.MLV_EQUALS_SLV, Status.FINALIZATION_IN_PROGRESS),
    (False, False, C.FINALIZATION_COMPLETE, Status.FINALIZATION_DONE),
])
def test_each_combination_of_mark_and_layout_is_one_checkpoint(
    mark: bool, behind: bool, checkpoint: C, status: Status
) -> None:
    assert layout.checkpoint_of(mark, behind) is checkpoint
    assert checkpoint.status is status


def test_pipelines_are_frozen_between_the_mark_and_mlv_equals_slv_and_datanodes_compared_after() -> None:
    assert [layout.should_create_new_pipelines(c) for c in C] == [True, False, True, True]
    assert [layout.should_tell_datanodes_to_finalize(c) for c in C] == [False, False, True, True]
    assert C.MLV_EQUALS_SLV.has_crossed(C.FINALIZATION_STARTED)
    assert not C.FINALIZATION_STARTED.has_crossed(C.MLV_EQUALS_SLV)
