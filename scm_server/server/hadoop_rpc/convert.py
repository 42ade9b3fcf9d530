"""The Hadoop RPC edge's message conversions between the project's messages and Ozone's: the block protocol's
values, the location protocol's answers (replicas, the replication manager report, datanode usage, enums by name),
the topology tree, result codes. The shared by-name machinery and the datanode and pipeline conversions live in
:mod:`scm_server.ozone_wire`. Pure: every translator converts through here, none keeps a conversion of its own."""

from __future__ import annotations

import array
from collections.abc import Iterable, Sequence
from typing import Any

from scm_server.exceptions import ResultCodes, SCMException
from scm_server.hadoop_ipc import encode_varint
from scm_server.ozone_wire import (
    container_field,
    container_info_bytes,
    datanode_to_wire,
    enum_by_name,
    pipeline_id_from_wire,
    pipeline_to_wire,
)
from scm_server.proto import hdds_pb2, scm_client_pb2
from scm_server.proto.ozone import ScmAdminProtocol_pb2 as wire_loc
from scm_server.proto.ozone import ScmServerProtocol_pb2 as wire_block
from scm_server.proto.ozone import hdds_pb2 as wire
from scm_server.protocols import DatanodeUsageInfo


def exclude_list_from_wire(ex: wire.ExcludeListProto) -> hdds_pb2.ExcludeListProto:
    return hdds_pb2.ExcludeListProto(
        datanodes=list(ex.datanodes),
        containerIds=list(ex.containerIds),
        pipelineIds=[pipeline_id_from_wire(p) for p in ex.pipelineIds],
    )


def replication_type_from_wire(value: int) -> int | None:
    return enum_by_name(value, wire.ReplicationType, hdds_pb2.ReplicationType)


def replication_factor_from_wire(value: int) -> int | None:
    return enum_by_name(value, wire.ReplicationFactor, hdds_pb2.ReplicationFactor)


def allocate_response_to_wire(resp: scm_client_pb2.AllocateScmBlockResponseProto) -> wire_block.AllocateScmBlockResponseProto:
    return wire_block.AllocateScmBlockResponseProto.FromString(allocate_response_bytes(resp))


def field_bytes(number: int, payload: bytes) -> bytes:
    """One length-delimited protobuf field: its key (wire type 2), the length, the bytes."""
    return encode_varint(number << 3 | 2) + encode_varint(len(payload)) + payload


def allocate_response_bytes(resp: scm_client_pb2.AllocateScmBlockResponseProto) -> bytes:
    """The serialized Ozone ``AllocateScmBlockResponseProto`` of our answer (see :func:`allocated_blocks_bytes`)."""
    return allocated_blocks_bytes(
        [(b.containerBlockID.containerID, b.containerBlockID.localID, b.pipeline) for b in resp.blocks]
    )


def allocated_blocks_bytes(blocks: Sequence[tuple[int, int, hdds_pb2.Pipeline]]) -> bytes:
    """The serialized Ozone ``AllocateScmBlockResponseProto`` of allocated (containerID, localID, pipeline)
    blocks (:func:`blocks_bytes`)."""
    return blocks_bytes(*split_blocks(blocks))


def split_blocks(
    blocks: Sequence[tuple[int, int, hdds_pb2.Pipeline]],
) -> tuple[array.array[int], array.array[int], list[bytes]]:
    """Allocated blocks as (containerID, localID pairs; the index of each block's pipeline; each distinct
    pipeline's Ozone bytes): blocks on the same pipeline message share its bytes, and a pipeline's bytes are
    kept across answers (:func:`pipeline_field`), so most answers convert and serialize no pipeline (a
    100-block answer once converted, copied and serialized it 100 times)."""
    # by the identity of the pipeline message: ``blocks`` holds every one of them, so no id is reused meanwhile
    index: dict[int, int] = {}
    fields: list[bytes] = []
    ids = array.array("q")
    which = array.array("I")
    for container_id, local_id, p in blocks:
        i = index.get(id(p))
        if i is None:
            i = index[id(p)] = len(fields)
            fields.append(pipeline_field(p))
        ids.append(container_id)
        ids.append(local_id)
        which.append(i)
    return ids, which, fields


def blocks_bytes(ids: array.array[int], which: array.array[int], fields: list[bytes]) -> bytes:
    """The serialized ``AllocateScmBlockResponseProto`` of :func:`split_blocks`' parts, written field by field;
    each block's ``ContainerBlockID`` by hand."""
    parts: list[bytes] = []
    for n, i in enumerate(which):
        # ContainerBlockID { containerID = 1, localID = 2 } (int64 varints, wire type 0)
        cbid = b"\x08" + _int64(ids[2 * n]) + b"\x10" + _int64(ids[2 * n + 1])
        # AllocateScmBlockResponseProto.blocks = 3 { containerBlockID = 1, pipeline = 2 }
        inner = b"\x0a" + encode_varint(len(cbid)) + cbid + fields[i]
        parts.append(b"\x1a" + encode_varint(len(inner)) + inner)
    return b"".join(parts)


# Ozone's bytes of our pipelines, by the bytes of our pipeline message: a pipeline keeps its content for many
# answers (its state, leader or members changing make a new entry), so most answers convert none
_PIPELINE_FIELDS: dict[bytes, bytes] = {}
PIPELINE_FIELDS_MAX = 1024  # entries; the table is emptied when it grows past this


def pipeline_field(pipeline: hdds_pb2.Pipeline) -> bytes:
    """``AllocateBlockResponse.pipeline`` (field 2) holding Ozone's message of ``pipeline``, serialized."""
    key = pipeline.SerializeToString(deterministic=True)
    field = _PIPELINE_FIELDS.get(key)
    if field is None:
        if len(_PIPELINE_FIELDS) >= PIPELINE_FIELDS_MAX:
            _PIPELINE_FIELDS.clear()
        field = _PIPELINE_FIELDS[key] = field_bytes(2, pipeline_to_wire(pipeline).SerializeToString())
    return field


def containers_with_pipelines_bytes(
    pairs: Sequence[tuple[hdds_pb2.ContainerInfoProto, hdds_pb2.Pipeline | None]], number: int = 1
) -> bytes:
    """Ozone's ``ContainerWithPipeline`` of each (container, pipeline) pair as a repeated field ``number``,
    serialized: the container's bytes are ours (:func:`scm_server.ozone_wire.container_info_bytes`) and the
    pipeline's are kept across answers (:func:`pipeline_field`: ``ContainerWithPipeline.pipeline`` is field 2
    too) and looked up once per pipeline message in a call, so a batch answer converts no message field by
    field."""
    return _with_pipelines(((field_bytes(1, container_info_bytes(info)), p) for info, p in pairs), number)


def encoded_containers_with_pipelines_bytes(
    triples: Sequence[tuple[bytes, str | None, hdds_pb2.Pipeline | None]], number: int = 1
) -> bytes:
    """:func:`containers_with_pipelines_bytes` of containers already serialized (our ContainerInfoProto's bytes,
    its pipeline id, its pipeline: :meth:`scm_server.scm.StorageContainerManager.containers_encoded_with_pipelines`):
    each container's field is framed once while it is unchanged (:func:`scm_server.ozone_wire.container_field`)."""
    return _with_pipelines(((container_field(data, pid), p) for data, pid, p in triples), number)


def _with_pipelines(containers: Iterable[tuple[bytes, hdds_pb2.Pipeline | None]], number: int) -> bytes:
    """Each (container field 1, pipeline) as a ``ContainerWithPipeline`` in repeated field ``number``, each pipeline
    message's field made once per call (by its identity: the caller's sequence holds each one meanwhile)."""
    fields: dict[int, bytes] = {}
    parts = []
    for inner, pipeline in containers:
        if pipeline is not None:
            field = fields.get(id(pipeline))
            if field is None:
                field = fields[id(pipeline)] = pipeline_field(pipeline)
            inner += field
        parts.append(field_bytes(number, inner))
    return b"".join(parts)


_INT64 = 1 << 64


def _int64(value: int) -> bytes:
    """An int64 field's varint: a negative value as its 64-bit two's complement (ten bytes), as protobuf does."""
    return encode_varint(value + _INT64 if value < 0 else value)


def key_blocks_from_wire(kb: wire_block.KeyBlocks) -> scm_client_pb2.KeyBlocks:
    return scm_client_pb2.KeyBlocks(
        key=kb.key,
        blocks=[
            scm_client_pb2.BlockIDProto(
                containerID=b.containerBlockID.containerID, localID=b.containerBlockID.localID
            )
            for b in kb.blocks
        ],
    )


def delete_results_to_wire(
    results: list[scm_client_pb2.DeleteKeyBlocksResultProto],
) -> wire_block.DeleteScmKeyBlocksResponseProto:
    out = wire_block.DeleteScmKeyBlocksResponseProto()
    for r in results:
        item = out.results.add(objectKey=r.objectKey)
        for br in r.blockResults:
            result = enum_by_name(
                br.result, scm_client_pb2.DeleteScmBlockResult.Result, wire_block.DeleteScmBlockResult.Result,
                default=wire_block.DeleteScmBlockResult.unknownFailure,
            )
            block = item.blockResults.add(result=result)
            block.blockID.containerBlockID.containerID = br.blockID.containerID
            block.blockID.containerBlockID.localID = br.blockID.localID
    return out


def scm_info_to_wire(info: scm_client_pb2.GetScmInfoResponseProto) -> wire.GetScmInfoResponseProto:
    return wire.GetScmInfoResponseProto(clusterId=info.clusterId, scmId=info.scmId, peerRoles=list(info.peerRoles))


DEFAULT_RACK = "/default-rack"


def sort_by_distance(
    known: list[hdds_pb2.DatanodeDetailsProto], wanted: list[str], client: str
) -> list[hdds_pb2.DatanodeDetailsProto]:
    """SortDatanodes: the datanodes named in ``wanted`` (uuids; unknown ones dropped, as Ozone does), nearest
    to ``client`` first. The client is a datanode when its address or host name is one's; then that node comes
    first, its rack's next, other racks last. Equal distances (and every node, when the client is not a
    datanode) keep the order asked for, where Ozone shuffles them."""
    by_uuid = {dn.uuid: dn for dn in known}
    nodes = [by_uuid[u] for u in wanted if u in by_uuid]
    reader = next((dn for dn in known if client and client in (dn.ipAddress, dn.hostName)), None)
    if reader is None:
        return nodes
    reader_rack = reader.networkLocation or DEFAULT_RACK

    def distance(dn: hdds_pb2.DatanodeDetailsProto) -> int:
        if dn.uuid == reader.uuid:
            return 0
        return 2 if (dn.networkLocation or DEFAULT_RACK) == reader_rack else 4

    return sorted(nodes, key=distance)


def status_of(result: ResultCodes) -> int:
    """The block protocol's Status for an SCM result code: the same name where Ozone has it (its
    Status lists SCMException.ResultCodes in order), else INTERNAL_ERROR (the message names ours)."""
    try:
        return int(wire_block.Status.Value(result.value))
    except ValueError:
        return int(wire_block.INTERNAL_ERROR)


# Ozone's default network topology schema (network-topology-default.xml): the root (level 1, cost 1),
# inner nodes such as racks (cost 1), datanodes as leaves (cost 0).
ROOT_COST = 1
INNER_COST = 1


def cluster_tree(datanodes: list[hdds_pb2.DatanodeDetailsProto]) -> wire.InnerNode:
    """GetClusterTree: the network topology as Ozone's ``InnerNodeImpl.toProtobuf`` writes it and its
    ``fromProtobuf`` reads it back. The root is named ``""`` at location ``""`` (its path is ``/``); every
    component of a datanode's network location (``/rack1``, or ``/dc1/rack1``) is an inner node named by
    that component, located at its parent's path, one level below it; each datanode is a leaf keyed by its
    network name (its uuid unless it set one), carried whole as ``datanodeDetails``. ``numOfLeaves``
    counts the datanodes beneath. Children keep a stable order (by name). A datanode without a location
    is on ``/default-rack``, as in Ozone."""

    class _Inner:
        def __init__(self, name: str, location: str, level: int) -> None:
            self.name, self.location, self.level = name, location, level
            self.inner: dict[str, _Inner] = {}
            self.leaves: dict[str, hdds_pb2.DatanodeDetailsProto] = {}

        @property
        def path(self) -> str:
            return self.location + self.name if self.location == "/" else f"{self.location}/{self.name}"

        def leaf_count(self) -> int:
            return len(self.leaves) + sum(c.leaf_count() for c in self.inner.values())

        def to_wire(self) -> wire.InnerNode:
            out = wire.InnerNode(numOfLeaves=self.leaf_count())
            out.nodeTopology.CopyFrom(wire.NodeTopology(
                name=self.name, location=self.location, level=self.level,
                cost=ROOT_COST if self.level == 1 else INNER_COST,
            ))
            for name in sorted(self.inner):
                out.childrenMap.add(networkName=name).networkNode.innerNode.CopyFrom(self.inner[name].to_wire())
            for name in sorted(self.leaves):
                out.childrenMap.add(networkName=name).networkNode.datanodeDetails.CopyFrom(
                    datanode_to_wire(self.leaves[name])
                )
            return out

    root = _Inner("", "", 1)
    for dn in datanodes:
        location = (dn.networkLocation or DEFAULT_RACK).rstrip("/") or DEFAULT_RACK
        if not location.startswith("/"):
            raise ValueError(f"datanode {dn.uuid} has network location {location!r}, which does not start with /")
        node = root
        for part in location.strip("/").split("/"):
            child = node.inner.get(part)
            if child is None:
                child = node.inner[part] = _Inner(part, node.path, node.level + 1)
            node = child
        leaf = hdds_pb2.DatanodeDetailsProto()
        leaf.CopyFrom(dn)
        leaf.networkLocation = location  # where the tree puts it, also when the datanode named none
        node.leaves[dn.networkName or dn.uuid] = leaf
    return root.to_wire()


# ---- the location protocol's answers (ozone admin) ----
def admin_errors_to_wire(
    errors: Sequence[scm_client_pb2.DatanodeAdminError],
) -> list[wire_loc.DatanodeAdminErrorResponseProto]:
    """The hosts a decommission, maintenance or recommission could not act on, with why (``failedHosts``)."""
    return [wire_loc.DatanodeAdminErrorResponseProto(host=e.host, error=e.error) for e in errors]


def replica_to_wire(info: hdds_pb2.ContainerReplicaInfo) -> wire.SCMContainerReplicaProto:
    """A replica as ``ozone admin container info`` lists it: Ozone's SCMContainerReplicaProto."""
    r = info.replica
    out = wire.SCMContainerReplicaProto(
        containerID=r.containerID,
        state=hdds_pb2.ContainerReplicaProto.State.Name(r.state),
        datanodeDetails=datanode_to_wire(info.datanode),
        placeOfBirth=r.originNodeId or info.datanode.uuid,
        sequenceID=r.blockCommitSequenceId,
        keyCount=r.keyCount,
        bytesUsed=r.used,
    )
    if r.HasField("replicaIndex"):
        out.replicaIndex = r.replicaIndex
    if r.HasField("dataChecksum"):
        out.dataChecksum = r.dataChecksum
    return out


def report_to_wire(report: hdds_pb2.ReplicationManagerReportProto) -> wire.ReplicationManagerReportProto:
    """Our replication manager report in Ozone's shape (KeyIntValue counters, ContainerID samples)."""
    out = wire.ReplicationManagerReportProto(timestamp=report.timestamp)
    for counter in report.stat:
        out.stat.add(key=counter.key, value=counter.count)
    for sample in report.statSample:
        out.statSample.add(key=sample.key, container=[wire.ContainerID(id=c) for c in sample.containerIds])
    return out


def usage_to_wire(usage: DatanodeUsageInfo) -> wire.DatanodeUsageInfoProto:
    """A datanode's usage as Ozone's DatanodeUsageInfoProto (``ozone admin datanode usageinfo``)."""
    return wire.DatanodeUsageInfoProto(
        capacity=usage.capacity,
        used=usage.used,
        remaining=usage.remaining,
        committed=usage.committed,
        node=datanode_to_wire(usage.details),
        containerCount=usage.container_count,
        pipelineCount=usage.pipeline_count,
        freeSpaceToSpare=usage.free_space_to_spare,
        reserved=usage.reserved,
        fsCapacity=usage.fs_capacity,
        fsAvailable=usage.fs_available,
    )


def enum_from_wire(value: int, source: Any, target: Any, what: str) -> int:
    """``value`` of Ozone's enum ``source`` as the same-named value of ours (``target``); an INVALID_REQUEST
    SCMException naming ``what`` when ours has no such name."""
    mapped = enum_by_name(value, source, target)
    if mapped is None:
        raise SCMException(ResultCodes.INVALID_REQUEST, f"{what} {source.Name(value)} is not known to this SCM")
    return mapped
