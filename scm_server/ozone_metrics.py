"""Ozone's metric names for our values: the JMX beans Ozone's SCM registers and the Prometheus names its sink writes.

An Ozone admin's dashboards and scripts read ``/jmx`` (Hadoop's JMX servlet: ``{"beans": [...]}``, each bean an
object name plus attributes) and ``/prom`` (Ozone's Prometheus sink over Hadoop's metrics system). This module
holds the shape of both, with no I/O and no SCM internals:

* :class:`Bean`: one bean, by Ozone's object name (``Hadoop:service=StorageContainerManager,name=SCMNodeMetrics``),
  its metrics record name (what the Prometheus name is built from), its tags and attributes;
* :func:`prometheus_name`: Hadoop's ``PrometheusMetricsSink`` naming: record name and metric name capitalised and
  joined, split before each capital that starts a word, joined with ``_``, lower-cased, any other character ``_``
  (``ReplicationManagerMetrics`` + ``InflightReplication`` -> ``replication_manager_metrics_inflight_replication``);
* :meth:`Bean.as_jmx` / :func:`prom_families`: the two renderings (the web server filters /jmx by ``qry``);
* :data:`NOT_SERVED`: the beans and attributes Ozone's SCM serves that ours deliberately does not, with why
  (docs/ozone-compatibility.md lists the same; a test holds the two and the recorded list of Ozone's names together).

The facade gathers the values (``scm_server/ozone_beans.py``); the web server renders them.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from prometheus_client.core import GaugeMetricFamily, Metric

SCM_SERVICE = "Hadoop:service=StorageContainerManager"

# Hadoop's split: before a capital not preceded by the start, a capital or "_"; and before a capital that starts a
# lower-case run (so "SCMNode" splits as "SCM" "Node", "DataSizeMovedGB" as "Data" "Size" "Moved" "GB").
_SPLIT = re.compile(r"(?<!^)(?<![A-Z_])(?=[A-Z])|(?<!^)(?=[A-Z][a-z])")
_DELIMITERS = re.compile(r"[^a-zA-Z0-9]+")
_LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")


def prometheus_name(record: str, metric: str) -> str:
    """The name Ozone's Prometheus sink gives ``metric`` of the metrics record ``record``."""
    base = record[:1].upper() + record[1:] + metric[:1].upper() + metric[1:]
    joined = "_".join(_SPLIT.split(base)).lower()
    return _DELIMITERS.sub("_", joined)


# an attribute's value as the JMX servlet writes it: a number, a string, or a list (an MXBean's map or array)
Value = object


@dataclass(frozen=True)
class Bean:
    """One JMX bean. ``record`` is the metrics record name for a metrics source (the Prometheus names are built
    from it), ``None`` for an MXBean, which Hadoop's sink never sees (it is only on /jmx)."""

    name: str
    record: str | None
    attributes: Mapping[str, Value]
    tags: Mapping[str, str] = field(default_factory=dict)

    def as_jmx(self) -> dict[str, object]:
        bean: dict[str, object] = {"name": self.name, "modelerType": self.record or self.name.rsplit("=", 1)[-1]}
        bean.update({f"tag.{k}": v for k, v in self.tags.items()})
        bean.update(self.attributes)
        return bean


def _number(value: Value) -> float | None:
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, int | float):
        return float(value)
    return None


def prom_families(beans: Sequence[Bean]) -> Iterator[Metric]:
    """One gauge family per numeric attribute of every metrics-source bean, named as Ozone's sink names it, with
    the bean's tags as labels (lower-cased, as the sink writes them)."""
    for bean in beans:
        if bean.record is None:
            continue
        # the bean's own tags; an extra record's (``datanode.1``, Hadoop's suffix) labels none of the bean's series
        labels = {k.lower(): v for k, v in bean.tags.items() if _LABEL.fullmatch(k)}
        for attr, value in bean.attributes.items():
            number = _number(value)
            if number is None:
                continue
            family = GaugeMetricFamily(
                prometheus_name(bean.record, attr), f"{attr} of {bean.record} (Ozone's name)", labels=list(labels)
            )
            family.add_metric(list(labels.values()), number)
            yield family


@dataclass(frozen=True)
class NotServed:
    """Ozone beans (object-name pattern) or attributes (attribute pattern within matching beans) ours leaves out."""

    bean: str
    attribute: str  # "*": the whole bean
    why: str


# What Ozone 2.2.0's SCM serves and ours does not, and why. Patterns are shell-style (fnmatch).
NOT_SERVED: tuple[NotServed, ...] = (
    NotServed(f"{SCM_SERVICE},name=Jvm*", "*", "JVM internals (heap, GC, threads of a Java process); ours is a "
              "Python process: its own process_* and python_gc_* series are on /prom"),
    NotServed(f"{SCM_SERVICE},name=EventQueue*", "*", "Ozone's in-process event bus (one bean per event and "
              "handler); ours calls its handlers directly, there is no queue to measure"),
    NotServed(f"{SCM_SERVICE},name=Rocksdb_scm.db", "*", "RocksDB's own statistics; scm.db is LevelDB here"),
    NotServed(f"{SCM_SERVICE},name=RDBMetrics", "*", "RocksDB key-lookup statistics; scm.db is LevelDB here"),
    NotServed(f"{SCM_SERVICE},name=ManagedRocksObjectMetrics", "*", "leak tracking of RocksJava objects"),
    NotServed(f"{SCM_SERVICE},name=DBCheckpointMetrics", "*", "Ozone's HTTP checkpoint servlet; our members "
              "transfer checkpoints over the inter-SCM gRPC service"),
    NotServed(f"{SCM_SERVICE},name=RpcActivityForPort*", "RpcQueueTime*", "calls wait in no queue here: each "
              "runs as soon as it is read, a call that waits (Raft, the disk) in a task of its own "
              "(scm_hadoop_rpc_latency_seconds times them)"),
    NotServed(f"{SCM_SERVICE},name=RpcActivityForPort*", "CallQueueLength", "no call queue (as RpcQueueTime*)"),
    NotServed(f"{SCM_SERVICE},name=RpcActivityForPort*", "RpcClientBackoff", "no call queue to back off from"),
    NotServed(f"{SCM_SERVICE},name=RpcActivityForPort*", "RpcLockWaitTime*", "Hadoop's namesystem lock; none here"),
    NotServed(f"{SCM_SERVICE},name=RpcActivityForPort*", "RpcProcessingTimeAvgTime", "an average over Hadoop's "
              "last metrics interval; ours: scm_hadoop_rpc_latency_seconds (a histogram) by protocol and method"),
    NotServed(f"{SCM_SERVICE},name=RpcActivityForPort*", "RpcSlowCalls", "not counted"),
    NotServed(f"{SCM_SERVICE},name=RpcActivityForPort*", "NumDroppedConnections", "connections are not dropped "
              "for load here; idle ones close after twice ipc.client.connection.maxidletime, as Hadoop's"),
    NotServed(f"{SCM_SERVICE},name=RpcActivityForPort*", "tag.NumOpenConnectionsPerUser", "open connections "
              "are counted per port, not per user"),
    NotServed(f"{SCM_SERVICE},name=RpcDetailedActivityForPort*", "*", "as RpcActivityForPort*"),
    NotServed(f"{SCM_SERVICE},name=ScmBlockLocationProtocol", "*", "Ozone's per-cmdType ProtocolMessageMetrics "
              "are on /prom under Ozone's names (scm_block_location_protocol_counter, _time, _concurrency, by "
              "type), counted at the Hadoop RPC edge; not as a /jmx bean"),
    NotServed(f"{SCM_SERVICE},name=ScmContainerLocationProtocol", "*", "as ScmBlockLocationProtocol "
              "(scm_container_location_protocol_* on /prom)"),
    NotServed(f"{SCM_SERVICE},name=SCMDatanodeProtocol", "*", "as ScmBlockLocationProtocol "
              "(scm_datanode_protocol_* on /prom)"),
    NotServed(f"{SCM_SERVICE},name=UgiMetrics", "*", "Hadoop's UserGroupInformation logins (JAAS)"),
    NotServed(f"{SCM_SERVICE},name=MetricsSystem,sub=*", "*", "Hadoop's metrics system itself (sinks, snapshots)"),
    NotServed(f"{SCM_SERVICE},name=NettyMetrics", "*", "Netty's direct memory (Java)"),
    NotServed(f"{SCM_SERVICE},name=HttpServer2Metrics", "*", "Jetty's thread pool (Java); ours is aiohttp"),
    NotServed(f"{SCM_SERVICE},name=SCMMetrics", "*", "sums of the datanodes' container-report statistics "
              "(reads, writes, keys); our datanode reports are not summed"),
    NotServed(f"{SCM_SERVICE},name=SCMPerformanceMetrics", "*", "allocateBlock/deleteKey latencies in ns; ours: "
              "scm_rpc_latency_seconds by method"),
    NotServed(f"{SCM_SERVICE},name=SCMContainerPlacementMetrics", "*", "placement attempt counters; not counted"),
    NotServed("Hadoop:service=BlockManager,name=BlockManagerImpl", "*", "an MXBean with no attributes"),
    NotServed(f"{SCM_SERVICE},name=SCMPipelineMetrics", "NumBlocksAllocated-*", "per-pipeline block counters "
              "(one attribute per pipeline id); ours: scm_blocks_allocated_total"),
    NotServed(f"{SCM_SERVICE},name=SCMPipelineMetrics", "PipelineCreationLatencyNs*", "not timed"),
    NotServed(f"{SCM_SERVICE},name=SCMNodeMetrics", "SSD*", "storage types: our datanode reports carry none"),
    NotServed(f"{SCM_SERVICE},name=SCMNodeMetrics", "*SSD*", "storage types: our datanode reports carry none"),
    NotServed(f"{SCM_SERVICE},name=SCMNodeMetrics", "TotalFilesystem*", "the datanodes' file systems beyond "
              "Ozone's volumes; our node reports carry the volumes only"),
    NotServed(f"{SCM_SERVICE},name=SCMNodeMetrics", "Num*Failed", "a report that fails to parse is refused at "
              "the edge (never counted by the node manager)"),
    NotServed(f"{SCM_SERVICE},name=SCMNodeMetrics", "NumPendingContainers*", "Ozone's pending-allocation "
              "accounting per datanode; not kept"),
    NotServed(f"{SCM_SERVICE},name=SCMNodeMetrics", "NumSkippedFullNodeContainerAllocation", "not counted"),
    NotServed(f"{SCM_SERVICE},name=SCMNodeMetrics", "NumNode*ReportProcessed", "node and command-queue reports "
              "arrive inside heartbeats here: NumHBProcessed counts them"),
    NotServed(f"{SCM_SERVICE},name=ReplicationManagerMetrics", "EcDeletion*", "erasure-coded replicas are "
              "deleted here but counted with the others (DeletionCmdsSentTotal); EcReconstructionCmds*Total are "
              "served"),
    NotServed(f"{SCM_SERVICE},name=ReplicationManagerMetrics", "EcReplica*", "erasure-coded replicas are "
              "copied and created here but not counted apart; EcReconstructionCmds*Total are served"),
    NotServed(f"{SCM_SERVICE},name=ReplicationManagerMetrics", "EcPartial*", "partial EC reconstruction: not "
              "done here"),
    NotServed(f"{SCM_SERVICE},name=ReplicationManagerMetrics", "InflightEc*", "erasure coding (as Ec*)"),
    NotServed(f"{SCM_SERVICE},name=ReplicationManagerMetrics", "Partial*", "partial (EC) replication"),
    NotServed(f"{SCM_SERVICE},name=ReplicationManagerMetrics", "*QueueSize", "our ReplicationManager acts on "
              "each container in its pass; it keeps no under/over-replicated queues"),
    NotServed(f"{SCM_SERVICE},name=ReplicationManagerMetrics", "*Timeout*", "expired pending ops are dropped "
              "without a per-kind count"),
    NotServed(f"{SCM_SERVICE},name=ReplicationManagerMetrics", "QuasiClosedStuck*", "sub-states of "
              "QUASI_CLOSED_STUCK; ours reports the state as a whole (StuckQuasiClosedContainers)"),
    NotServed(f"{SCM_SERVICE},name=ReplicationManagerMetrics", "MissingUnderReplicatedContainers",
              "not a separate health state here"),
    NotServed(f"{SCM_SERVICE},name=ReplicationManagerMetrics", "UnhealthyOverReplicatedContainers",
              "not a separate health state here"),
    NotServed(f"{SCM_SERVICE},name=ReplicationManagerMetrics", "UnhealthyUnderReplicatedContainers",
              "not a separate health state here"),
    NotServed(f"{SCM_SERVICE},name=ReplicationManagerMetrics", "Replicas*Total", "replicas are counted when "
              "reports arrive, not per completed command"),
    NotServed(f"{SCM_SERVICE},name=SCMBlockDeletingService", "NumBlockDeletionTransaction*odes", "per-datanode "
              "deletion outcomes; ours counts the commands sent and the transactions committed"),
    NotServed(f"{SCM_SERVICE},name=SCMBlockDeletingService", "NumBlockDeletionTransactionCreated", "not counted"),
    NotServed(f"{SCM_SERVICE},name=SCMBlockDeletingService", "NumBlock*Failure*", "not counted"),
    NotServed(f"{SCM_SERVICE},name=SCMBlockDeletingService", "NumBlockDeletionCommandSuccess", "not counted"),
    NotServed(f"{SCM_SERVICE},name=SCMBlockDeletingService", "NumBlockAddedForDeletionToDN", "not counted"),
    NotServed(f"{SCM_SERVICE},name=SCMBlockDeletingService", "Num*Transactions", "not counted"),
    NotServed(f"{SCM_SERVICE},name=SCMBlockDeletingService", "*.[0-9]", "Ozone's per-state summaries as extra "
              "records; ours: scm_deleted_block_transactions (pending)"),
    NotServed(f"{SCM_SERVICE},name=SCMBlockDeletingService", "Num*Transactions", "not counted"),
    NotServed(f"{SCM_SERVICE},name=SCMPipelineMetrics", "NumPipeline[!C]*", "only pipelines created are counted"),
    NotServed(f"{SCM_SERVICE},name=SCMPipelineMetrics", "NumPipelineC[!r]*", "not counted"),
    NotServed(f"{SCM_SERVICE},name=SCMPipelineMetrics", "NumPipelineCreationFailed", "not counted"),
    NotServed(f"{SCM_SERVICE},name=SCMNodeMetrics", "NonWritableNodes", "not computed"),
    NotServed(f"{SCM_SERVICE},name=SCMNodeMetrics", "VolumeFailures", "failed volumes are left out of a node's "
              "space, not counted"),
    NotServed(f"{SCM_SERVICE},name=StorageContainerManagerInfo,component=ServerRuntime", "Namespace",
              "Ozone's SCM service id; see ozone.scm.service.ids on /conf"),
    NotServed(f"{SCM_SERVICE},name=SCMContainerManagerMetrics", "*Failed", "a refused report is not counted"),
    NotServed(f"{SCM_SERVICE},name=SCMContainerManagerMetrics", "NumFailure*", "not counted"),
    NotServed(f"{SCM_SERVICE},name=SCMContainerManagerMetrics", "NumSuccessful*Containers", "not counted"),
    NotServed(f"{SCM_SERVICE},name=SCMContainerManagerMetrics", "NumListContainerOps", "see scm_rpc_requests_total"),
    NotServed(f"{SCM_SERVICE},name=StorageContainerManagerInfo,component=ServerRuntime", "RocksDbDirectory",
              "scm.db is LevelDB (its directory is in Namespace's neighbour ozone.scm.db.dirs)"),
    NotServed(f"{SCM_SERVICE},name=StorageContainerManagerInfo,component=ServerRuntime", "RatisLogDirectory",
              "our Raft log lives inside scm.db"),
    NotServed(f"{SCM_SERVICE},name=StorageContainerManagerInfo,component=ServerRuntime",
              "SafeModeCurrentContainerThreshold", "see SafeModeMetrics"),
    NotServed("Hadoop:service=SCMNodeManager,name=SCMNodeManagerInfo", "NodeInfo", "Ozone's per-storage-type sums; "
              "see NodeStatistics and SCMNodeMetrics"),
    NotServed("Hadoop:service=SCMNodeManager,name=SCMNodeManagerInfo", "NodeStatusInfo", "per-node heartbeat "
              "details; see /api/status"),
    NotServed("Hadoop:service=SCMNodeManager,name=SCMNodeManagerInfo", "NodeStatistics", "usage statistics; "
              "see `ozone admin datanode usageinfo`"),
)

# /prom names Ozone's SCM writes outside its Hadoop beans: Ratis's own (dropwizard) registry. Ours serves seven of
# them for the same events of its own Raft (scm_server/ha/ratis_metrics.py), and the Raft figures under scm_term,
# scm_applied_index, scm_is_leader and scm_raft_leader_known.
NOT_SERVED_PROM_PREFIXES: tuple[tuple[str, str], ...] = (
    ("ratis_", "Apache Ratis's other metrics (its gRPC, leader election and state machine internals); ours serves "
               "ratis_log_worker_appendEntryCount, _flushCount, _appendEntryLatency, _syncTime and "
               "ratis_server_clientWriteRequest, _clientReadRequest, _numFailedClientWriteOnServer for the same "
               "events of its own Raft"),
    ("rpcdetailed_", "Hadoop's per-method IPC timings (record rpcdetailed); ours: scm_rpc_latency_seconds"),
)


def rpc_activity_bean(port: int, server_name: str, hostname: str, activity: Mapping[str, int]) -> Bean:
    """Hadoop's ``RpcActivityForPort<port>`` bean of one Hadoop RPC listener (metrics record ``rpc``, so
    ``rpc_num_open_connections{port,servername,context,hostname}`` on /prom) with the attributes ``activity``
    holds (``HadoopRpcServer.activity``)."""
    return Bean(f"{SCM_SERVICE},name=RpcActivityForPort{port}", "rpc", dict(activity),
                {"port": str(port), "serverName": server_name, "Context": "rpc", "Hostname": hostname})


def not_served(bean_name: str, attribute: str) -> NotServed | None:
    """The entry saying why ``attribute`` of ``bean_name`` is not served ("*" asks about the whole bean)."""
    import fnmatch

    for entry in NOT_SERVED:
        if not fnmatch.fnmatchcase(bean_name, entry.bean):
            continue
        if entry.attribute == "*" or (attribute != "*" and fnmatch.fnmatchcase(attribute, entry.attribute)):
            return entry
    return None


def render_not_served() -> str:
    """The Markdown tables of :data:`NOT_SERVED` and :data:`NOT_SERVED_PROM_PREFIXES` (docs/ozone-compatibility.md,
    written by ``make compat-docs``)."""
    rows = [
        "| Ozone bean (`Hadoop:service=StorageContainerManager,name=...` unless given in full) or `bean` `attribute` "
        "| why ours does not serve it |",
        "|---|---|",
    ]
    for e in NOT_SERVED:
        what = e.bean.split("name=", 1)[1] if e.bean.startswith(SCM_SERVICE + ",") else e.bean
        label = what if e.attribute == "*" else f"{what}` `{e.attribute}"
        why = e.why.replace("|", "\\|")
        rows.append(f"| `{label}` | {why} |")
    rows += ["", "Names on Ozone's `/prom` outside its Hadoop beans:", "", "| prefix | why |", "|---|---|"]
    rows += [f"| `{prefix}*` | {why} |" for prefix, why in NOT_SERVED_PROM_PREFIXES]
    return "\n".join(rows)
