"""Typed configuration groups, one frozen dataclass per concern (Ozone's ``@ConfigGroup``).

Each field is declared once, with :func:`setting`: its Ozone key, its value kind, what it means (Ozone's
``@Config`` requires a description) and its default **as text**, the way ``ozone-default.xml`` writes it
(``setting("hdds.scm.replication.thread.interval", "duration", "...", "300s")``). The typed default is parsed
from that text, the raw default table (:data:`scm_server.conf.defaults.DEFAULTS`) and the key tables of
docs/operations.md (``make config-docs``) are generated from it, so a default lives in one place. The
``from_conf`` class methods parse an :class:`OzoneConfiguration` once, at the edge, and the objects are passed
down to the managers. A malformed value raises ConfigError naming the key.

Groups: :class:`SCMConfig` (storage, sizes, ports), :class:`SafeModeConfig`,
:class:`NodeManagerConfig`, :class:`PipelineConfig`, :class:`ReplicationManagerConfig`,
:class:`BlockConfig`, :class:`SCMHAConfig` (service ids, nodes, addresses, primordial node),
:class:`TopologyConfig` (switch mapping, topology schema), :class:`PlacementConfig` (placement policies).
"""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from scm_server.conf import ports
from scm_server.conf.addresses import check_host, check_name, parse_port, split_host_port
from scm_server.conf.values import parse_bool, parse_duration, parse_float, parse_int, parse_size
from scm_server.exceptions import ConfigError

if TYPE_CHECKING:
    from scm_server.conf.source import ConfigSource

T = TypeVar("T")


def cfg(key: str, kind: str, description: str, default: str | None = None) -> dict[str, str | None]:
    """Field metadata: the Ozone key, how to parse it, what it means, and its default text (None: no default)."""
    return {"key": key, "kind": kind, "description": description, "default": default}


def setting(key: str, kind: str, description: str, default: str | None = None, *, unset: Any = None) -> Any:
    """A config field declared once: the typed default is ``default`` parsed as ``kind`` (so
    ``"5GB"`` becomes ``5 << 30``), or ``unset`` when the key has no default (``ozone.scm.db.dirs``)."""
    value = unset if default is None else _parse(key, kind, default)
    return dataclasses.field(default=value, metadata=cfg(key, kind, description, default))


def _parse(key: str, kind: str, raw: str) -> Any:
    if kind == "duration":
        return parse_duration(key, raw)
    if kind == "size":
        return parse_size(key, raw)
    if kind == "int":
        return parse_int(key, raw)
    if kind == "float":
        return parse_float(key, raw)
    if kind == "bool":
        return parse_bool(key, raw)
    if kind == "port":
        return parse_port(key, raw)
    if kind == "str":
        return raw
    if kind == "list":
        return tuple(p.strip() for p in raw.split(",") if p.strip())
    raise AssertionError(f"unknown config kind {kind}")


def _build(cls: type[T], conf: ConfigSource, **extra: Any) -> T:
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if f.name in extra:
            kwargs[f.name] = extra[f.name]
            continue
        key = f.metadata.get("key")
        if not key:
            continue
        raw = conf.get_str(key)
        if raw is None:
            continue  # dataclass default
        kwargs[f.name] = _parse(key, f.metadata["kind"], raw)
    return cls(**kwargs)


def _for_node(conf: ConfigSource, key: str, service_id: str, node_id: str) -> tuple[str, str] | None:
    """Ozone's per-node lookup (``key.svc.node``, ``key.svc``, ``key``): the key that held the value, and it."""
    for candidate in (f"{key}.{service_id}.{node_id}", f"{key}.{service_id}", key):
        value = conf.get_str(candidate)
        if value is not None:
            return candidate, value
    return None


def _field(cls: type[Any], field_name: str) -> dataclasses.Field[Any]:
    for f in dataclasses.fields(cls):
        if f.name == field_name:
            return f
    raise KeyError(field_name)


def key_of(cls: type[Any], field_name: str) -> str:
    """The Ozone key of a field (for messages and docs)."""
    return str(_field(cls, field_name).metadata["key"])


def _example(cls: type[Any], field_name: str, fallback: str) -> str:
    """The field's default text for an error's example, else ``fallback``."""
    default = _field(cls, field_name).metadata.get("default")
    return fallback if default is None else str(default)


def _check_positive(cls: type[Any], obj: Any, *names: str) -> None:
    for name in names:
        value = getattr(obj, name)
        bad = value <= timedelta(0) if isinstance(value, timedelta) else value <= 0
        if bad:
            key = key_of(cls, name)
            raise ConfigError(f"{key}: value {value} must be positive (e.g. {key}={_example(cls, name, '1')})")


def _check_fraction(cls: type[Any], obj: Any, *names: str) -> None:
    for name in names:
        value = getattr(obj, name)
        if not 0.0 <= value <= 1.0:
            key = key_of(cls, name)
            raise ConfigError(
                f"{key}: value {value} must be between 0 and 1 (e.g. {key}={_example(cls, name, '0.9')})"
            )


def _port(p: ports.ServicePort, description: str, kind: str = "port") -> Any:
    """A port field whose key and default come from the port table (:mod:`scm_server.conf.ports`)."""
    return setting(p.port_key, kind, description, str(p.default_port))


@dataclasses.dataclass(frozen=True)
class SCMConfig:
    """Storage locations, sizes and the SCM's own service ports."""

    metadata_dirs: str = setting(
        "ozone.metadata.dirs", "str",
        "Directory of the SCM's metadata: scm/current/VERSION, scm.db, the Raft log and certificates unless a more "
        "specific key says otherwise. Required: the SCM refuses to start without it.",
        unset="",
    )
    db_dirs: str | None = setting(
        "ozone.scm.db.dirs", "str",
        "Directory of scm.db and scm/current/VERSION when they should not sit under ozone.metadata.dirs.",
    )
    container_size: int = setting(
        "ozone.scm.container.size", "size",
        "Size of a container (bytes; units B..PB): the largest block allocateBlock accepts and the room an "
        "open container has for blocks; also the datanode simulator's container size.",
        "5GB",
    )
    block_size: int = setting(
        "ozone.scm.block.size", "size",
        "Ozone's block size (bytes; units B..PB). Checked at start (not above ozone.scm.container.size); the "
        "size of each block comes with the allocateBlock request, so the SCM itself does not read it further.",
        "256MB",
    )
    container_close_threshold: float = setting(
        "hdds.container.close.threshold", "float",
        "Fraction (0..1) of ozone.scm.container.size at which a datanode asks the SCM to close a container. "
        "Checked at start; the datanode simulator applies Ozone's 0.9 itself.",
        "0.9",
    )
    sequence_id_batch_size: int = setting(
        "ozone.scm.sequence.id.batch.size", "int",
        "How many IDs (local IDs, container IDs) the leader takes from the replicated sequence per Raft "
        "compare-and-swap; hands them out locally until the batch is used.",
        "1000",
    )
    init_layout_version: int = setting(
        "testing.hdds.scm.init.layout.version", "int",
        "Ozone's key: the HDDS metadata layout version `scm --init` records in a new cluster's VERSION (-1: the "
        "newest this software knows, 10). An older one makes a cluster that needs `ozone admin scm "
        "finalizeupgrade`, as one upgraded from an older Ozone release; meant for testing upgrades.",
        "-1",
    )
    max_blocks_per_request: int = setting(
        "ozone.scm.block.max.blocks.per.request", "int",
        "Ours: the most blocks one allocateBlock call may ask for; a larger numBlocks is refused with "
        "INVALID_REQUEST, so one caller cannot hold the leader for long.",
        "1000",
    )
    scm_names: tuple[str, ...] = setting(
        "ozone.scm.names", "list",
        "Comma-separated host[:port] of a single (non-HA) SCM; the CLI's default --scm when no HA service is set.",
        unset=(),
    )
    client_address: str | None = setting(
        "ozone.scm.client.address", "str",
        "host or host:port clients use for the location (admin) protocol over Hadoop RPC; per-node suffix "
        "supported.",
    )
    # Ozone's port keys serve Hadoop RPC; our gRPC services have keys of their own (scm_server.conf.ports)
    client_port: int = _port(
        ports.CLIENT_HADOOP,
        "Port of the location (admin/client) protocol over Hadoop RPC, Ozone's key (ozone admin, OM).",
    )
    block_client_port: int = _port(
        ports.BLOCK_HADOOP, "Port of the block protocol over Hadoop RPC, Ozone's key (OM's allocateBlock)."
    )
    datanode_port: int = _port(
        ports.DATANODE_HADOOP, "Port of the datanode protocol over Hadoop RPC, Ozone's key (register, heartbeat)."
    )
    client_grpc_port: int = _port(
        ports.CLIENT_GRPC,
        "Ours: port of the location (admin/client) protocol and the block protocol over gRPC (our CLI, clients).",
    )
    block_client_grpc_port: int = _port(ports.BLOCK_GRPC, "Ours: port of the block protocol over gRPC.")
    datanode_grpc_port: int = _port(
        ports.DATANODE_GRPC, "Ours: port of the datanode protocol over gRPC (the simulator's gRPC datanodes)."
    )
    http_address: str = setting(
        "ozone.scm.http-address", "str",
        "host:port of the web listener (status page, /prom, /health, /ready); per-node suffix supported.",
        "0.0.0.0:9876",
    )
    security_enabled: bool = setting(
        "ozone.security.enabled", "bool",
        "Certificates: the SCMs run the CA and the security protocol, and members enrol for certificates "
        "(docs/security.md).",
        "false",
    )

    @classmethod
    def from_conf(cls, conf: ConfigSource) -> SCMConfig:
        conf.require("ozone.metadata.dirs", "/data/metadata")
        result = _build(cls, conf)
        _check_positive(cls, result, "container_size", "block_size", "sequence_id_batch_size", "max_blocks_per_request")
        _check_fraction(cls, result, "container_close_threshold")
        for name in result.scm_names:
            split_host_port("ozone.scm.names", name)
        if result.client_address:
            split_host_port("ozone.scm.client.address", result.client_address)
        split_host_port("ozone.scm.http-address", result.http_address)
        if result.block_size > result.container_size:
            raise ConfigError(
                f"ozone.scm.block.size ({result.block_size} bytes) is larger than ozone.scm.container.size "
                f"({result.container_size} bytes); set a smaller block size (e.g. ozone.scm.block.size=256MB)"
            )
        return result

    @property
    def scm_db_dir(self) -> Path:
        """Where scm.db and scm/current/VERSION live: ozone.scm.db.dirs, else ozone.metadata.dirs."""
        return Path(self.db_dirs or self.metadata_dirs)

    @property
    def metadata_dir(self) -> Path:
        return Path(self.metadata_dirs)


@dataclasses.dataclass(frozen=True)
class SafeModeConfig:
    enabled: bool = setting(
        "hdds.scm.safemode.enabled", "bool",
        "Whether the SCM starts in safemode and waits for its exit rules before allocating blocks.",
        "true",
    )
    min_datanode: int = setting(
        "hdds.scm.safemode.min.datanode", "int",
        "Safemode exit rule: the number of datanodes that must have registered.",
        "1",
    )
    threshold_pct: float = setting(
        "hdds.scm.safemode.threshold.pct", "float",
        "Safemode exit rule: the fraction (0..1) of containers with at least one reported replica.",
        "0.99",
    )
    healthy_pipeline_pct: float = setting(
        "hdds.scm.safemode.healthy.pipeline.pct", "float",
        "Safemode exit rule: the fraction (0..1) of pipelines that must be healthy (all members reported).",
        "0.10",
    )
    one_replica_pipeline_pct: float = setting(
        "hdds.scm.safemode.atleast.one.node.reported.pipeline.pct", "float",
        "Safemode exit rule: the fraction (0..1) of pipelines with at least one datanode reported.",
        "0.90",
    )
    pipeline_creation: bool = setting(
        "hdds.scm.safemode.pipeline.creation", "bool",
        "Whether pipelines are created while in safemode (so the pipeline rules can be met).",
        "true",
    )
    rule_refresh_interval: timedelta = setting(
        "hdds.scm.safemode.rule.refresh.interval", "duration",
        "Ozone: how often the safemode rules are re-evaluated (duration; ns/us/ms/s/m/h/d, plain number = ms). "
        "Accepted and checked; this SCM does not read it further.",
        "5s",
    )
    wait_time_after_exit: timedelta = setting(
        "hdds.scm.wait.time.after.safemode.exit", "duration",
        "After leaving safemode, how long the replication manager and background services wait before acting, "
        "so late reports arrive (duration).",
        "5m",
    )
    log_interval: timedelta = setting(
        "hdds.scm.safemode.log.interval", "duration",
        "While in safemode, how often the SCM logs its safemode status and each exit rule's progress (duration).",
        "1m",
    )

    @classmethod
    def from_conf(cls, conf: ConfigSource) -> SafeModeConfig:
        result = _build(cls, conf)
        _check_fraction(cls, result, "threshold_pct", "healthy_pipeline_pct", "one_replica_pipeline_pct")
        _check_positive(cls, result, "log_interval")
        if result.min_datanode < 0:
            raise ConfigError("hdds.scm.safemode.min.datanode must be >= 0 (e.g. hdds.scm.safemode.min.datanode=1)")
        return result


@dataclasses.dataclass(frozen=True)
class NodeManagerConfig:
    heartbeat_interval: timedelta = setting(
        "hdds.heartbeat.interval", "duration",
        "How often a datanode heartbeats (duration); the SCM answers with it and never declares a node stale "
        "sooner.",
        "30s",
    )
    heartbeat_thread_interval: timedelta = setting(
        "ozone.scm.heartbeat.thread.interval", "duration",
        "How often the node manager checks heartbeats and moves nodes between HEALTHY, STALE and DEAD (duration).",
        "3s",
    )
    stale_node_interval: timedelta = setting(
        "ozone.scm.stale.node.interval", "duration",
        "A datanode silent this long is STALE (duration; at least hdds.heartbeat.interval).",
        "5m",
    )
    dead_node_interval: timedelta = setting(
        "ozone.scm.dead.node.interval", "duration",
        "A datanode silent this long is DEAD and its replicas are re-replicated (duration; longer than "
        "ozone.scm.stale.node.interval).",
        "10m",
    )
    admin_monitor_interval: timedelta = setting(
        "ozone.scm.datanode.admin.monitor.interval", "duration",
        "How often the datanode admin monitor (leader only) moves decommissioning and entering-maintenance "
        "datanodes along once their replicas are safe elsewhere, and ends expired maintenance (duration).",
        "30s",
    )

    @classmethod
    def from_conf(cls, conf: ConfigSource) -> NodeManagerConfig:
        result = _build(cls, conf)
        _check_positive(cls, result, "heartbeat_interval", "heartbeat_thread_interval", "stale_node_interval",
                        "admin_monitor_interval")
        if result.dead_node_interval <= result.stale_node_interval:
            raise ConfigError(
                f"ozone.scm.dead.node.interval ({result.dead_node_interval}) must be longer than "
                f"ozone.scm.stale.node.interval ({result.stale_node_interval}); e.g. stale=5m, dead=10m"
            )
        if result.stale_node_interval < result.heartbeat_interval:
            raise ConfigError(
                f"ozone.scm.stale.node.interval ({result.stale_node_interval}) must not be shorter than "
                f"hdds.heartbeat.interval ({result.heartbeat_interval}); e.g. heartbeat=30s, stale=5m"
            )
        return result


@dataclasses.dataclass(frozen=True)
class PipelineConfig:
    creation_interval: timedelta = setting(
        "ozone.scm.pipeline.creation.interval", "duration",
        "How often the background pipeline creator runs on the leader (duration).",
        "120s",
    )
    auto_create_factor_one: bool = setting(
        "ozone.scm.pipeline.creation.auto.factor.one", "bool",
        "Whether the background creator also makes replication-factor-ONE pipelines.",
        "true",
    )
    datanode_pipeline_limit: int = setting(
        "ozone.scm.datanode.pipeline.limit", "int",
        "The most open factor-THREE pipelines one datanode takes part in; 0: ozone.scm.pipeline.per.metadata.disk "
        "times the datanode's healthy volumes.",
        "2",
    )
    pipeline_per_metadata_disk: int = setting(
        "ozone.scm.pipeline.per.metadata.disk", "int",
        "With ozone.scm.datanode.pipeline.limit=0, a datanode's pipeline limit is this times its healthy volumes.",
        "2",
    )
    owner_container_count: int = setting(
        "ozone.scm.pipeline.owner.container.count", "int",
        "How many open containers the SCM keeps per pipeline (per owner) for block allocation.",
        "3",
    )
    allocated_timeout: timedelta = setting(
        "ozone.scm.pipeline.allocated.timeout", "duration",
        "A pipeline still ALLOCATED (not reported open by its datanodes) after this long is scrubbed (duration).",
        "5m",
    )
    destroy_timeout: timedelta = setting(
        "ozone.scm.pipeline.destroy.timeout", "duration",
        "How long a closed pipeline waits for its containers to close before it is removed (duration).",
        "66s",
    )
    ec_pipeline_minimum: int = setting(
        "ozone.scm.ec.pipeline.minimum", "int",
        "Block allocation keeps making new EC pipelines of a layout (rs-3-2-1024k, ...) until at least this many "
        "are open.",
        "5",
    )
    ec_pipeline_per_volume_factor: float = setting(
        "ozone.scm.ec.pipeline.per.volume.factor", "float",
        "EC pipelines of a layout allowed per healthy datanode volume, divided by the layout's d+p nodes "
        "(never fewer than ozone.scm.ec.pipeline.minimum).",
        "1.0",
    )

    @classmethod
    def from_conf(cls, conf: ConfigSource) -> PipelineConfig:
        result = _build(cls, conf)
        _check_positive(
            cls, result, "creation_interval", "owner_container_count", "pipeline_per_metadata_disk", "ec_pipeline_minimum"
        )
        if result.ec_pipeline_per_volume_factor < 0:
            raise ConfigError(
                f"ozone.scm.ec.pipeline.per.volume.factor: value {result.ec_pipeline_per_volume_factor} must not be "
                "negative (e.g. ozone.scm.ec.pipeline.per.volume.factor=1.0)"
            )
        if result.datanode_pipeline_limit < 0:
            raise ConfigError(
                "ozone.scm.datanode.pipeline.limit must not be negative (e.g. ozone.scm.datanode.pipeline.limit=2; "
                "0 derives it from ozone.scm.pipeline.per.metadata.disk)"
            )
        return result


TABLE_MAPPING = "org.apache.hadoop.net.TableMapping"
SCRIPT_BASED_MAPPING = "org.apache.hadoop.net.ScriptBasedMapping"
_PLACEMENT_PACKAGE = "org.apache.hadoop.hdds.scm.container.placement.algorithms."
RACK_AWARE = _PLACEMENT_PACKAGE + "SCMContainerPlacementRackAware"
RACK_SCATTER = _PLACEMENT_PACKAGE + "SCMContainerPlacementRackScatter"
CAPACITY = _PLACEMENT_PACKAGE + "SCMContainerPlacementCapacity"
RANDOM = _PLACEMENT_PACKAGE + "SCMContainerPlacementRandom"
PIPELINE_PLACEMENT = "org.apache.hadoop.hdds.scm.pipeline.PipelinePlacementPolicy"
_LEADER_PACKAGE = "org.apache.hadoop.hdds.scm.pipeline.leader.choose.algorithms."
MIN_LEADER_COUNT = _LEADER_PACKAGE + "MinLeaderCountChoosePolicy"
DEFAULT_LEADER = _LEADER_PACKAGE + "DefaultLeaderChoosePolicy"
CONTAINER_PLACEMENTS = (RACK_AWARE, RACK_SCATTER, CAPACITY, RANDOM)
PIPELINE_PLACEMENTS = (PIPELINE_PLACEMENT,)
LEADER_CHOOSE_POLICIES = (MIN_LEADER_COUNT, DEFAULT_LEADER)


def java_class(cls: type[Any], field_name: str, value: str, valid: tuple[str, ...]) -> str:
    """A class-valued key as Ozone reads it, by full Java class name; the short name is accepted too."""
    text = value.strip()
    for full in valid:
        if text in (full, full.rsplit(".", 1)[1]):
            return full
    names = ", ".join(v.rsplit(".", 1)[1] for v in valid)
    key = key_of(cls, field_name)
    raise ConfigError(
        f"{key}: unknown class {text!r}; use one of {names} (short or full name, e.g. {key}={valid[0]})"
    )


@dataclasses.dataclass(frozen=True)
class TopologyConfig:
    """Where a registering datanode sits in the network (Hadoop's switch mapping, Ozone's topology schema)."""

    mapping_impl: str | None = setting(
        "net.topology.node.switch.mapping.impl", "str",
        "Hadoop's DNSToSwitchMapping that gives a registering datanode its rack: TableMapping or "
        "ScriptBasedMapping (short or full org.apache.hadoop.net. name). Unset with no table file: the location "
        "the datanode reports is kept (Ozone's datanodes report /default-rack).",
    )
    table_file: str | None = setting(
        "net.topology.table.file.name", "str",
        "TableMapping's file: one 'host-or-IP rack' pair per line ('#' comments); names not in it are on "
        "/default-rack. Setting it alone selects TableMapping.",
    )
    script_file: str | None = setting(
        "net.topology.script.file.name", "str",
        "ScriptBasedMapping's executable: called with datanode names as arguments, prints one rack per name.",
    )
    script_number_args: int = setting(
        "net.topology.script.number.args", "int",
        "The most names ScriptBasedMapping passes to one run of the script.",
        "100",
    )
    script_timeout: timedelta = setting(
        "ozone.scm.network.topology.script.timeout", "duration",
        "Ours (Hadoop has no bound): a topology script run still going after this long is killed and the "
        "datanode gets /default-rack with one warning (duration).",
        "10s",
    )
    schema_file: str = setting(
        "ozone.scm.network.topology.schema.file", "str",
        "Ozone's network topology schema (XML or YAML): the built-in 3-level ROOT/RACK/NODE schema by its name, "
        "or a file path; schemas of other depths (nodegroup) are refused at start.",
        "network-topology-default.xml",
    )
    use_datanode_hostname: bool = setting(
        "hdds.datanode.use.datanode.hostname", "bool",
        "Resolve a datanode's rack by its hostname instead of its IP address (the legacy "
        "dfs.datanode.use.datanode.hostname is read when this is unset).",
        "false",
    )

    @classmethod
    def from_conf(cls, conf: ConfigSource) -> TopologyConfig:
        extra: dict[str, Any] = {}
        if conf.source_of("hdds.datanode.use.datanode.hostname") in ("default", "unset"):
            legacy = conf.get_str("dfs.datanode.use.datanode.hostname")
            if legacy is not None:
                extra["use_datanode_hostname"] = parse_bool("dfs.datanode.use.datanode.hostname", legacy)
        result = _build(cls, conf, **extra)
        if result.mapping_impl is not None:
            chosen = java_class(cls, "mapping_impl", result.mapping_impl, (TABLE_MAPPING, SCRIPT_BASED_MAPPING))
            result = dataclasses.replace(result, mapping_impl=chosen)
        _check_positive(cls, result, "script_number_args", "script_timeout")
        return result

    @property
    def mapping(self) -> str | None:
        """The mapping in force: the key's class, TableMapping when only a table file is set, else None."""
        if self.mapping_impl is None and self.table_file:
            return TABLE_MAPPING
        return self.mapping_impl


@dataclasses.dataclass(frozen=True)
class PlacementConfig:
    """Which datanodes get a new pipeline or container replica (Ozone's placement policies)."""

    container_placement: str = setting(
        "ozone.scm.container.placement.impl", "str",
        "Placement of Ratis container replicas (the replication manager's targets): SCMContainerPlacementRackAware, "
        "SCMContainerPlacementRackScatter, SCMContainerPlacementCapacity or SCMContainerPlacementRandom (short or "
        "full org.apache.hadoop.hdds.scm.container.placement.algorithms. name).",
        RACK_AWARE,
    )
    ec_container_placement: str = setting(
        "ozone.scm.container.placement.ec.impl", "str",
        "Placement of erasure-coded container replicas; the same class names as ozone.scm.container.placement.impl.",
        RACK_SCATTER,
    )
    pipeline_placement: str = setting(
        "ozone.scm.pipeline.placement.impl", "str",
        "Placement of Ratis pipelines: PipelinePlacementPolicy (short or full name).",
        PIPELINE_PLACEMENT,
    )
    leader_choose_policy: str = setting(
        "ozone.scm.pipeline.leader-choose.policy", "str",
        "Which member of a new Ratis pipeline is suggested as its leader: MinLeaderCountChoosePolicy (the member "
        "leading the fewest pipelines) or DefaultLeaderChoosePolicy (none suggested; Ratis elects).",
        MIN_LEADER_COUNT,
    )
    @classmethod
    def from_conf(cls, conf: ConfigSource) -> PlacementConfig:
        result = _build(cls, conf)
        result = dataclasses.replace(
            result,
            container_placement=java_class(cls, "container_placement", result.container_placement,
                                           CONTAINER_PLACEMENTS),
            ec_container_placement=java_class(cls, "ec_container_placement", result.ec_container_placement,
                                              CONTAINER_PLACEMENTS),
            pipeline_placement=java_class(cls, "pipeline_placement", result.pipeline_placement, PIPELINE_PLACEMENTS),
            leader_choose_policy=java_class(cls, "leader_choose_policy", result.leader_choose_policy,
                                            LEADER_CHOOSE_POLICIES),
        )
        return result


@dataclasses.dataclass(frozen=True)
class ReplicationManagerConfig:
    interval: timedelta = setting(
        "hdds.scm.replication.thread.interval", "duration",
        "How often the replication manager (leader only) checks every container's replicas (duration).",
        "300s",
    )
    datanode_replication_limit: int = setting(
        "hdds.scm.replication.datanode.replication.limit", "int",
        "The most replicate commands queued to one datanode at a time.",
        "20",
    )
    datanode_reconstruction_weight: int = setting(
        "hdds.scm.replication.datanode.reconstruction.weight", "int",
        "How many replicate commands one EC reconstruction command counts as against a datanode's replication "
        "limit (reconstruction reads from several datanodes and decodes).",
        "3",
    )
    inflight_limit_factor: float = setting(
        "hdds.scm.replication.inflight.limit.factor", "float",
        "Replications and reconstructions in flight across the cluster are capped at this factor x healthy "
        "datanodes x hdds.scm.replication.datanode.replication.limit; 0 means no cap.",
        "0.75",
    )
    datanode_delete_limit: int = setting(
        "hdds.scm.replication.datanode.delete.container.limit", "int",
        "The most delete-container commands queued to one datanode at a time.",
        "40",
    )
    event_timeout: timedelta = setting(
        "hdds.scm.replication.event.timeout", "duration",
        "A replicate or delete command not confirmed by a report within this long is considered lost and may be "
        "sent again (duration).",
        "12m",
    )
    event_timeout_datanode_offset: timedelta = setting(
        "hdds.scm.replication.event.timeout.datanode.offset", "duration",
        "Subtracted from hdds.scm.replication.event.timeout to give the deadline a replicate, reconstruct or delete "
        "command carries to the datanode, so that a datanode never acts on a command the SCM already counts as "
        "lost (duration; at least 0, less than the event timeout).",
        "6m",
    )
    maintenance_replica_minimum: int = setting(
        "hdds.scm.replication.maintenance.replica.minimum", "int",
        "Replicas that must stay on in-service nodes while others are in maintenance.",
        "2",
    )
    maintenance_remaining_redundancy: int = setting(
        "hdds.scm.replication.maintenance.remaining.redundancy", "int",
        "EC: parity replicas that must stay on in-service nodes while others are in maintenance; indexes beyond "
        "that are copied before a node enters maintenance.",
        "1",
    )
    container_sample_limit: int = setting(
        "hdds.scm.replication.container.sample.limit", "int",
        "How many container IDs the ReplicationManagerReport keeps as samples per health state.",
        "100",
    )

    @classmethod
    def from_conf(cls, conf: ConfigSource) -> ReplicationManagerConfig:
        result = _build(cls, conf)
        _check_positive(
            cls, result, "interval", "datanode_replication_limit", "datanode_reconstruction_weight",
            "datanode_delete_limit", "event_timeout",
        )
        if result.inflight_limit_factor < 0:
            raise ConfigError(
                f"hdds.scm.replication.inflight.limit.factor: value {result.inflight_limit_factor} must not be "
                "negative (0 for no cap; e.g. hdds.scm.replication.inflight.limit.factor=0.75)"
            )
        offset, timeout = result.event_timeout_datanode_offset, result.event_timeout
        if offset.total_seconds() < 0 or offset >= timeout:
            raise ConfigError(
                f"hdds.scm.replication.event.timeout.datanode.offset: value {offset} must be at least 0 and less "
                f"than hdds.scm.replication.event.timeout ({timeout}); e.g. half of it"
            )
        return result


@dataclasses.dataclass(frozen=True)
class ContainerBalancerConfig:
    """Ozone's ContainerBalancerConfiguration (``hdds.container.balancer.*``): the defaults of
    ``ozone admin containerbalancer start``, whose options override them for one run."""

    threshold: float = setting(
        "hdds.container.balancer.utilization.threshold", "float",
        "A percentage in [0, 100): the cluster is balanced when every datanode's utilization (used over capacity) "
        "is within this many points of the cluster's average.",
        "10",
    )
    datanodes_involved_max_percentage: int = setting(
        "hdds.container.balancer.datanodes.involved.max.percentage.per.iteration", "int",
        "At most this percentage (0 to 100) of the healthy, in-service datanodes takes part in one iteration, as "
        "source or target (rounded down: with fewer than 10 datanodes, 20 allows none; raise it on small clusters).",
        "20",
    )
    size_moved_max_per_iteration: int = setting(
        "hdds.container.balancer.size.moved.max.per.iteration", "size",
        "The most data scheduled to move in one iteration.",
        "500GB",
    )
    size_entering_target_max: int = setting(
        "hdds.container.balancer.size.entering.target.max", "size",
        "The most data entering one target datanode in one iteration.",
        "26GB",
    )
    size_leaving_source_max: int = setting(
        "hdds.container.balancer.size.leaving.source.max", "size",
        "The most data leaving one source datanode in one iteration.",
        "26GB",
    )
    iterations: int = setting(
        "hdds.container.balancer.iterations", "int",
        "How many iterations the balancer runs (-1: until the cluster is balanced).",
        "10",
    )
    exclude_containers: tuple[str, ...] = setting(
        "hdds.container.balancer.exclude.containers", "list",
        "Container ids never moved, comma-separated (\"1, 4, 5\").",
        "",
    )
    include_containers: tuple[str, ...] = setting(
        "hdds.container.balancer.include.containers", "list",
        "Only these container ids are moved, comma-separated (empty: any).",
        "",
    )
    move_timeout: timedelta = setting(
        "hdds.container.balancer.move.timeout", "duration",
        "How long one container's move (replication to the target, then deletion from the source) may take.",
        "65m",
    )
    move_replication_timeout: timedelta = setting(
        "hdds.container.balancer.move.replication.timeout", "duration",
        "How long the replication to the target may take within a move (less than the move timeout).",
        "50m",
    )
    balancing_iteration_interval: timedelta = setting(
        "hdds.container.balancer.balancing.iteration.interval", "duration",
        "The pause between two iterations (more than the move timeout).",
        "70m",
    )
    include_datanodes: tuple[str, ...] = setting(
        "hdds.container.balancer.include.datanodes", "list",
        "Only these datanodes (host names or IP addresses, comma-separated) are balanced (empty: all).",
        "",
    )
    exclude_datanodes: tuple[str, ...] = setting(
        "hdds.container.balancer.exclude.datanodes", "list",
        "These datanodes (host names or IP addresses, comma-separated) are left out of balancing.",
        "",
    )
    move_network_topology_enable: bool = setting(
        "hdds.container.balancer.move.networkTopology.enable", "bool",
        "Prefer targets close to the source in the network topology. Accepted and shown; every move here keeps "
        "the container's rack spread whatever this says.",
        "false",
    )
    trigger_du_before_move_enable: bool = setting(
        "hdds.container.balancer.trigger.du.before.move.enable", "bool",
        "Ask datanodes to refresh their usage before an iteration. Accepted and shown; datanode usage here comes "
        "from their periodic node reports.",
        "false",
    )
    include_non_standard_containers: bool = setting(
        "hdds.container.balancer.include.non.standard.containers", "bool",
        "Also move containers in non-standard states (QUASI_CLOSED). Accepted and shown; only CLOSED, fully "
        "replicated containers are moved here.",
        "false",
    )

    @classmethod
    def from_conf(cls, conf: ConfigSource) -> ContainerBalancerConfig:
        return _build(cls, conf)


@dataclasses.dataclass(frozen=True)
class BlockConfig:
    deleting_service_interval: timedelta = setting(
        "ozone.block.deleting.service.interval", "duration",
        "How often the leader sends deleted-block transactions to datanodes (duration).",
        "60s",
    )
    deletion_per_interval_max: int = setting(
        "hdds.scm.block.deletion.per-interval.max", "int",
        "The most deleted-block transactions sent to datanodes in one interval.",
        "100000",
    )
    deletion_max_retry: int = setting(
        "ozone.scm.block.deletion.max.retry", "int",
        "How many times a deleted-block transaction is resent before it is left for an operator.",
        "4096",
    )

    @classmethod
    def from_conf(cls, conf: ConfigSource) -> BlockConfig:
        result = _build(cls, conf)
        _check_positive(cls, result, "deleting_service_interval", "deletion_per_interval_max")
        return result


@dataclasses.dataclass(frozen=True)
class SCMNodeDetails:
    """One SCM of an HA service: ``ozone.scm.address.<svc>.<node>`` plus per-node port overrides. The client,
    block and datanode ports here are the **gRPC** ones (``ozone.scm.<x>.grpc.port``): the SCMs reach each other
    and report themselves to our own clients over gRPC; Ozone's keys name the Hadoop RPC ports."""

    service_id: str
    node_id: str
    host: str
    ratis_port: int
    grpc_port: int
    client_port: int
    block_client_port: int
    datanode_port: int
    http_address: str

    @property
    def ratis_address(self) -> str:
        return f"{self.host}:{self.ratis_port}"

    @property
    def grpc_address(self) -> str:
        return f"{self.host}:{self.grpc_port}"

    @property
    def client_address(self) -> str:
        return f"{self.host}:{self.client_port}"

    @property
    def block_client_address(self) -> str:
        return f"{self.host}:{self.block_client_port}"

    @property
    def datanode_address(self) -> str:
        return f"{self.host}:{self.datanode_port}"


@dataclasses.dataclass(frozen=True)
class SCMHAConfig:
    """SCM HA service layout (Ozone's SCMHANodeDetails + SCMHAConfiguration)."""

    service_ids: tuple[str, ...] = setting(
        "ozone.scm.service.ids", "list",
        "The SCM HA service id(s); with one, it is the service; with several, ozone.scm.default.service.id "
        "picks ours.",
        unset=(),
    )
    default_service_id: str | None = setting(
        "ozone.scm.default.service.id", "str",
        "The SCM service this process belongs to when ozone.scm.service.ids lists several.",
    )
    node_id: str | None = setting(
        "ozone.scm.node.id", "str",
        "This SCM's node id, one of ozone.scm.nodes.<serviceId>.",
    )
    primordial_node_id: str | None = setting(
        "ozone.scm.primordial.node.id", "str",
        "Node id or host of the primordial SCM: the one that runs scm --init (creating the cluster id and root "
        "CA); the others run scm --bootstrap.",
    )
    skip_bootstrap_validation: bool = setting(
        "ozone.scm.skip.bootstrap.validation", "bool",
        "Whether scm --bootstrap skips checking the cluster id against the running ring.",
        "false",
    )
    leader_election_timeout: timedelta = setting(
        "ozone.scm.ha.ratis.leader.election.timeout", "duration",
        "Raft election timeout: a follower that hears no leader for a randomised 1-2x this campaigns (duration; "
        "Ozone ships 5s, ours 1s, docs/ha.md); the client also gives up a silent SCM after it.",
        "1s",
    )
    request_timeout: timedelta = setting(
        "ozone.scm.ha.ratis.request.timeout", "duration",
        "How long a replicated request waits to be committed and applied before it fails (duration).",
        "30s",
    )
    ratis_storage_dir: str | None = setting(
        "ozone.scm.ha.ratis.storage.dir", "str",
        "Directory of the Raft log; default: under ozone.metadata.dirs.",
    )
    ratis_snapshot_dir: str | None = setting(
        "ozone.scm.ha.ratis.snapshot.dir", "str",
        "Directory of the Raft snapshots (checkpoints); default: under ozone.metadata.dirs.",
    )
    snapshot_threshold: int = setting(
        "ozone.scm.ha.ratis.snapshot.threshold", "int",
        "Applied entries after which the SCM takes a snapshot and compacts the Raft log.",
        "1000",
    )
    leader_ready_wait_timeout: timedelta = setting(
        "ozone.scm.ha.ratis.leader.ready.wait.timeout", "duration",
        "Ozone: how long a new leader waits to become ready (its term's first entry applied) (duration). "
        "Accepted and checked; this SCM does not read it further.",
        "60s",
    )
    transaction_buffer_flush_interval: timedelta = setting(
        "ozone.scm.ha.dbtransactionbuffer.flush.interval", "duration",
        "Ozone: how often the transaction buffer is flushed to scm.db with the applied index (duration). "
        "Accepted and checked; our state machine flushes once per applied batch of committed entries.",
        "60s",
    )
    service_id: str | None = None
    nodes: tuple[SCMNodeDetails, ...] = ()

    @classmethod
    def from_conf(cls, conf: ConfigSource) -> SCMHAConfig:
        base = _build(cls, conf)
        for sid in base.service_ids:
            check_name("ozone.scm.service.ids", sid, "service id", "scmservice")
        if base.default_service_id is not None:
            check_name("ozone.scm.default.service.id", base.default_service_id, "service id", "scmservice")
        if base.node_id is not None:
            check_name("ozone.scm.node.id", base.node_id, "node id", "scm1")
        service_id = base.default_service_id
        if service_id is None and base.service_ids:
            if len(base.service_ids) > 1:
                raise ConfigError(
                    f"ozone.scm.service.ids lists several services {list(base.service_ids)} but "
                    "ozone.scm.default.service.id is not set; set it (e.g. ozone.scm.default.service.id="
                    f"{base.service_ids[0]})"
                )
            service_id = base.service_ids[0]
        if service_id is None:
            if conf.get_str("ozone.scm.service.id") is not None:
                raise ConfigError(
                    "ozone.scm.service.id is set but the key is ozone.scm.service.ids (plural); "
                    "rename it (e.g. ozone.scm.service.ids=scmservice)"
                )
            return dataclasses.replace(base, service_id=None, nodes=())
        svc_source = (
            f"ozone.scm.default.service.id={service_id}" if base.default_service_id is not None
            else f"ozone.scm.service.ids={','.join(base.service_ids)}"
        )
        node_ids = conf.get_trimmed_list(f"ozone.scm.nodes.{service_id}")
        if not node_ids:
            raise ConfigError(
                f"ozone.scm.nodes.{service_id} is not set; list the SCM node ids of service {service_id} "
                f"(named by {svc_source}) (e.g. ozone.scm.nodes.{service_id}=scm1,scm2,scm3)"
            )
        for nid in node_ids:
            check_name(f"ozone.scm.nodes.{service_id}", nid, "node id", "scm1,scm2,scm3")
        if len(set(node_ids)) != len(node_ids):
            raise ConfigError(f"ozone.scm.nodes.{service_id}={','.join(node_ids)} lists a node id twice")
        nodes = []
        for nid in node_ids:
            address_key = f"ozone.scm.address.{service_id}.{nid}"
            host = conf.get_str(address_key)
            if host is None:
                raise ConfigError(
                    f"{address_key} is not set; give the hostname of SCM {nid} (listed in ozone.scm.nodes."
                    f"{service_id}) (e.g. {address_key}=scm1.example.com)"
                )
            host = check_host(address_key, host)

            def port(key: str, nid: str = nid) -> int:
                found = _for_node(conf, key, service_id, nid)
                assert found is not None, key  # every port key has a default
                return parse_port(*found)

            http = _for_node(conf, "ozone.scm.http-address", service_id, nid)
            if http is not None:
                split_host_port(*http)

            nodes.append(
                SCMNodeDetails(
                    service_id=service_id,
                    node_id=nid,
                    host=host,
                    ratis_port=port("ozone.scm.ratis.port"),
                    grpc_port=port("ozone.scm.grpc.port"),
                    client_port=port(ports.CLIENT_GRPC.port_key),
                    block_client_port=port(ports.BLOCK_GRPC.port_key),
                    datanode_port=port(ports.DATANODE_GRPC.port_key),
                    http_address=conf.get_for_node("ozone.scm.http-address", service_id, nid) or "0.0.0.0:9876",
                )
            )
        if base.node_id is not None and base.node_id not in node_ids:
            raise ConfigError(
                f"ozone.scm.node.id={base.node_id} is not one of ozone.scm.nodes.{service_id}={','.join(node_ids)}; "
                "set it to this SCM's node id"
            )
        if base.primordial_node_id is not None and base.primordial_node_id not in node_ids:
            hosts = {n.host for n in nodes}
            if base.primordial_node_id not in hosts:
                raise ConfigError(
                    f"ozone.scm.primordial.node.id={base.primordial_node_id} matches neither a node id nor a host "
                    f"of service {service_id}; set it to one of {','.join(node_ids)}"
                )
        return dataclasses.replace(base, service_id=service_id, nodes=tuple(nodes))

    @property
    def is_ha_configured(self) -> bool:
        return self.service_id is not None and bool(self.nodes)

    def node(self, node_id: str) -> SCMNodeDetails:
        for n in self.nodes:
            if n.node_id == node_id:
                return n
        raise ConfigError(f"SCM node {node_id} is not configured in ozone.scm.nodes.{self.service_id}")

    @property
    def local_node(self) -> SCMNodeDetails | None:
        return self.node(self.node_id) if self.node_id else None

    def peers(self) -> tuple[SCMNodeDetails, ...]:
        return tuple(n for n in self.nodes if n.node_id != self.node_id)

    def is_primordial(self, node_id: str | None = None, hostname: str | None = None) -> bool:
        """Ozone's SCMHAUtils.isPrimordialSCM: matched by node id or by hostname."""
        if self.primordial_node_id is None:
            return False
        nid = node_id or self.node_id
        if nid is not None and nid == self.primordial_node_id:
            return True
        return hostname is not None and hostname == self.primordial_node_id


@dataclasses.dataclass(frozen=True)
class SCMConfigurations:
    """Every typed group an SCM needs, parsed once from one OzoneConfiguration."""

    scm: SCMConfig
    safemode: SafeModeConfig
    node: NodeManagerConfig
    pipeline: PipelineConfig
    replication: ReplicationManagerConfig
    block: BlockConfig
    ha: SCMHAConfig
    topology: TopologyConfig = TopologyConfig()
    placement: PlacementConfig = PlacementConfig()
    balancer: ContainerBalancerConfig = ContainerBalancerConfig()

    @classmethod
    def from_conf(cls, conf: ConfigSource) -> SCMConfigurations:
        return cls(
            scm=SCMConfig.from_conf(conf),
            safemode=SafeModeConfig.from_conf(conf),
            node=NodeManagerConfig.from_conf(conf),
            pipeline=PipelineConfig.from_conf(conf),
            replication=ReplicationManagerConfig.from_conf(conf),
            block=BlockConfig.from_conf(conf),
            ha=SCMHAConfig.from_conf(conf),
            topology=TopologyConfig.from_conf(conf),
            placement=PlacementConfig.from_conf(conf),
            balancer=ContainerBalancerConfig.from_conf(conf),
        )
