"""Ozone's HDDS layout features and the checkpoints of SCM's upgrade finalization, as values.

A *layout version* numbers the on-disk formats and wire features of SCM and the datanodes (Ozone's
``HDDSLayoutFeature``). The *software* layout version (SLV) is the newest feature this software knows;
the *metadata* layout version (MLV) is the newest one the stored metadata has been finalized to. After
new software is installed on old data, MLV < SLV until an admin runs ``ozone admin scm finalizeupgrade``;
until then the cluster keeps to the old formats, so that a downgrade stays possible.

SCM's finalization moves through four checkpoints (Ozone's ``FinalizationCheckpoint``), each fixed by
two replicated facts, whether the ``#FINALIZING`` mark is in the ``meta`` table and whether MLV < SLV:

=====================  ====================  ============  ==========================
checkpoint             ``#FINALIZING`` mark  MLV < SLV     status it reports
=====================  ====================  ============  ==========================
FINALIZATION_REQUIRED  no                    yes           FINALIZATION_REQUIRED
FINALIZATION_STARTED   yes                   yes           FINALIZATION_IN_PROGRESS
MLV_EQUALS_SLV         yes                   no            FINALIZATION_IN_PROGRESS
FINALIZATION_COMPLETE  no                    no            FINALIZATION_DONE
=====================  ====================  ============  ==========================

So an SCM that never needed finalizing reports ``FINALIZATION_DONE``, as Ozone's SCM does once it has
built its upgrade context (``ALREADY_FINALIZED`` is only what ``finalizeupgrade`` answers then).
Nothing here does I/O.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


@dataclass(frozen=True)
class LayoutFeature:
    name: str
    layout_version: int
    description: str


# Ozone 2.2.0's HDDSLayoutFeature, in order; each version is one more than the one before.
HDDS_LAYOUT_FEATURES: tuple[LayoutFeature, ...] = (
    LayoutFeature("INITIAL_VERSION", 0, "Initial Layout Version"),
    LayoutFeature("DATANODE_SCHEMA_V2", 1, "Datanode RocksDB Schema Version 2 (with column families)"),
    LayoutFeature("SCM_HA", 2, "Storage Container Manager HA"),
    LayoutFeature(
        "ERASURE_CODED_STORAGE_SUPPORT", 3, "Ozone version with built in support for Erasure Coded block data storage."
    ),
    LayoutFeature("DATANODE_SCHEMA_V3", 4, "Datanode RocksDB Schema Version 3 (one rocksdb per disk)"),
    LayoutFeature("RATIS_DATASTREAM_PORT_IN_DATANODEDETAILS", 5, "Adding the RATIS_DATASTREAM port to the DatanodeDetails."),
    LayoutFeature("WEBUI_PORTS_IN_DATANODEDETAILS", 6, "Adding HTTP and HTTPS ports to DatanodeDetails."),
    LayoutFeature("HADOOP_PRC_PORTS_IN_DATANODEDETAILS", 7, "Adding Hadoop RPC ports to DatanodeDetails."),
    LayoutFeature(
        "HBASE_SUPPORT", 8, "Datanode RocksDB Schema Version 3 has an extra table for the last chunk of blocks to support HBase.)"
    ),
    LayoutFeature("WITNESSED_CONTAINER_DB_PROTO_VALUE", 9, "ContainerID table schema to use value type as proto"),
    LayoutFeature(
        "STORAGE_SPACE_DISTRIBUTION", 10, "Enhanced block deletion function for storage space distribution feature."
    ),
)

SOFTWARE_LAYOUT_VERSION = HDDS_LAYOUT_FEATURES[-1].layout_version

# The conf key Ozone's SCM reads when it initialises its storage at an older layout (to test upgrades).
INIT_LAYOUT_VERSION_KEY = "testing.hdds.scm.init.layout.version"


def feature(layout_version: int) -> LayoutFeature:
    """The feature of a layout version; ValueError naming the known range when there is none."""
    if not 0 <= layout_version <= SOFTWARE_LAYOUT_VERSION:
        raise ValueError(
            f"unknown HDDS layout version {layout_version}: this software knows 0..{SOFTWARE_LAYOUT_VERSION}"
        )
    return HDDS_LAYOUT_FEATURES[layout_version]


def unfinalized_features(metadata_layout_version: int) -> list[LayoutFeature]:
    """The features after ``metadata_layout_version``, in the order finalization applies them."""
    return [f for f in HDDS_LAYOUT_FEATURES if f.layout_version > metadata_layout_version]


class Status(enum.Enum):
    """Ozone's ``UpgradeFinalization.Status`` (the names ``ozone admin scm finalizationstatus`` prints)."""

    ALREADY_FINALIZED = "ALREADY_FINALIZED"
    STARTING_FINALIZATION = "STARTING_FINALIZATION"
    FINALIZATION_IN_PROGRESS = "FINALIZATION_IN_PROGRESS"
    FINALIZATION_DONE = "FINALIZATION_DONE"
    FINALIZATION_REQUIRED = "FINALIZATION_REQUIRED"


class FinalizationCheckpoint(enum.Enum):
    """(needs the #FINALIZING mark, needs MLV < SLV, the status it reports); in the order they are crossed."""

    FINALIZATION_REQUIRED = (False, True, Status.FINALIZATION_REQUIRED)
    FINALIZATION_STARTED = (True, True, Status.FINALIZATION_IN_PROGRESS)
    MLV_EQUALS_SLV = (True, False, Status.FINALIZATION_IN_PROGRESS)
    FINALIZATION_COMPLETE = (False, False, Status.FINALIZATION_DONE)

    @property
    def status(self) -> Status:
        return self.value[2]

    @property
    def order(self) -> int:
        return list(FinalizationCheckpoint).index(self)

    def has_crossed(self, other: FinalizationCheckpoint) -> bool:
        return self.order >= other.order


def checkpoint_of(has_finalizing_mark: bool, mlv_behind_slv: bool) -> FinalizationCheckpoint:
    """The one checkpoint the two replicated facts describe (every combination names exactly one)."""
    for checkpoint in FinalizationCheckpoint:
        needs_mark, needs_behind, _ = checkpoint.value
        if needs_mark == has_finalizing_mark and needs_behind == mlv_behind_slv:
            return checkpoint
    raise AssertionError("unreachable: the four checkpoints cover every combination")


def should_create_new_pipelines(checkpoint: FinalizationCheckpoint) -> bool:
    """Pipeline creation is frozen from the moment finalization starts until SCM's MLV reaches its SLV
    (existing pipelines are closed then; new ones must only use nodes at the new layout)."""
    return not checkpoint.has_crossed(FinalizationCheckpoint.FINALIZATION_STARTED) or checkpoint.has_crossed(
        FinalizationCheckpoint.MLV_EQUALS_SLV
    )


def should_tell_datanodes_to_finalize(checkpoint: FinalizationCheckpoint) -> bool:
    """Once SCM's own MLV equals its SLV it no longer changes: datanodes behind it are HEALTHY_READONLY and
    are told to finalize (``finalizeNewLayoutVersionCommand``)."""
    return checkpoint.has_crossed(FinalizationCheckpoint.MLV_EQUALS_SLV)


def datanode_layout_matches(
    dn_metadata: int, dn_software: int, scm_metadata: int, scm_software: int
) -> bool:
    """A datanode is at SCM's layout when both its metadata and its software layout versions equal SCM's."""
    return dn_metadata == scm_metadata and dn_software == scm_software


@dataclass(frozen=True)
class StatusAndMessages:
    status: Status
    messages: tuple[str, ...] = ()


# Ozone's UpgradeFinalization constants: what finalizeupgrade answers in each case.
STARTING_MSG = StatusAndMessages(Status.STARTING_FINALIZATION, ("Starting Finalization",))
FINALIZATION_IN_PROGRESS_MSG = StatusAndMessages(Status.FINALIZATION_IN_PROGRESS, ("Finalization in progress",))
FINALIZATION_REQUIRED_MSG = StatusAndMessages(Status.FINALIZATION_REQUIRED, ("Finalization required",))
FINALIZED_MSG = StatusAndMessages(Status.ALREADY_FINALIZED)

# The messages Ozone's SCM finalizer emits to the client that started finalization, in order.
STARTED_MESSAGE = "Finalization started."
CLOSING_PIPELINES_MESSAGE = (
    "  Existing pipelines and containers will be closed during Upgrade.\n"
    "  New pipelines creation will remain frozen until Upgrade is finalized."
)
FINISHED_MESSAGE = "Finalization is done."


def no_action_message(feature_name: str) -> str:
    return f"No onFinalize work defined for feature: {feature_name}."
