"""Typed configuration groups, one frozen dataclass per concern (Ozone's ``@ConfigGroup``).

Each field carries its Ozone key and value kind in dataclass metadata
(``metadata={"key": "hdds.scm.replication.thread.interval", "kind": "duration"}``); the
``from_conf`` class methods parse an :class:`OzoneConfiguration` once, at the edge, and the
objects are passed down to the managers. A malformed value raises ConfigError naming the key.

Groups: :class:`SCMConfig` (storage, sizes, ports), :class:`SafeModeConfig`,
:class:`NodeManagerConfig`, :class:`PipelineConfig`, :class:`ReplicationManagerConfig`,
:class:`BlockConfig`, :class:`SCMHAConfig` (service ids, nodes, addresses, primordial node).
"""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

from scm_server.conf import ports
from scm_server.conf.addresses import check_host, check_name, parse_port, split_host_port
from scm_server.conf.ozone_configuration import (
    DEFAULTS,
    OzoneConfiguration,
    parse_bool,
    parse_duration,
    parse_float,
    parse_int,
    parse_size,
)
from scm_server.exceptions import ConfigError

T = TypeVar("T")


def cfg(key: str, kind: str, description: str = "") -> dict[str, str]:
    """Field metadata: the Ozone key, how to parse it, and what it means."""
    return {"key": key, "kind": kind, "description": description}


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


def _build(cls: type[T], conf: OzoneConfiguration, **extra: Any) -> T:
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


def _for_node(conf: OzoneConfiguration, key: str, service_id: str, node_id: str) -> tuple[str, str] | None:
    """Ozone's per-node lookup (``key.svc.node``, ``key.svc``, ``key``): the key that held the value, and it."""
    for candidate in (f"{key}.{service_id}.{node_id}", f"{key}.{service_id}", key):
        value = conf.get_str(candidate)
        if value is not None:
            return candidate, value
    return None


def key_of(cls: type[Any], field_name: str) -> str:
    """The Ozone key of a field (for messages and docs)."""
    for f in dataclasses.fields(cls):
        if f.name == field_name:
            return str(f.metadata["key"])
    raise KeyError(field_name)


def _check_positive(cls: type[Any], obj: Any, *names: str) -> None:
    for name in names:
        value = getattr(obj, name)
        bad = value <= timedelta(0) if isinstance(value, timedelta) else value <= 0
        if bad:
            key = key_of(cls, name)
            raise ConfigError(f"{key}: value {value} must be positive (e.g. {key}={DEFAULTS.get(key, '1')})")


def _check_fraction(cls: type[Any], obj: Any, *names: str) -> None:
    for name in names:
        value = getattr(obj, name)
        if not 0.0 <= value <= 1.0:
            key = key_of(cls, name)
            raise ConfigError(f"{key}: value {value} must be between 0 and 1 (e.g. {key}={DEFAULTS.get(key, '0.9')})")


@dataclasses.dataclass(frozen=True)
class SCMConfig:
    """Storage locations, sizes and the SCM's own service ports."""

    metadata_dirs: str = dataclasses.field(default="", metadata=cfg("ozone.metadata.dirs", "str"))
    db_dirs: str | None = dataclasses.field(default=None, metadata=cfg("ozone.scm.db.dirs", "str"))
    container_size: int = dataclasses.field(default=5 << 30, metadata=cfg("ozone.scm.container.size", "size"))
    block_size: int = dataclasses.field(default=256 << 20, metadata=cfg("ozone.scm.block.size", "size"))
    container_close_threshold: float = dataclasses.field(
        default=0.9, metadata=cfg("hdds.container.close.threshold", "float")
    )
    sequence_id_batch_size: int = dataclasses.field(
        default=1000, metadata=cfg("ozone.scm.sequence.id.batch.size", "int")
    )
    max_blocks_per_request: int = dataclasses.field(
        default=1000, metadata=cfg("ozone.scm.block.max.blocks.per.request", "int")
    )
    scm_names: tuple[str, ...] = dataclasses.field(default=(), metadata=cfg("ozone.scm.names", "list"))
    client_address: str | None = dataclasses.field(default=None, metadata=cfg("ozone.scm.client.address", "str"))
    # Ozone's port keys serve Hadoop RPC; our gRPC services have keys of their own (scm_server.conf.ports)
    client_port: int = dataclasses.field(default=9860, metadata=cfg("ozone.scm.client.port", "port"))
    block_client_port: int = dataclasses.field(default=9863, metadata=cfg("ozone.scm.block.client.port", "port"))
    datanode_port: int = dataclasses.field(default=9861, metadata=cfg("ozone.scm.datanode.port", "port"))
    client_grpc_port: int = dataclasses.field(default=19860, metadata=cfg("ozone.scm.client.grpc.port", "port"))
    block_client_grpc_port: int = dataclasses.field(
        default=19863, metadata=cfg("ozone.scm.block.client.grpc.port", "port")
    )
    datanode_grpc_port: int = dataclasses.field(default=19861, metadata=cfg("ozone.scm.datanode.grpc.port", "port"))
    http_address: str = dataclasses.field(default="0.0.0.0:9876", metadata=cfg("ozone.scm.http-address", "str"))
    security_enabled: bool = dataclasses.field(default=False, metadata=cfg("ozone.security.enabled", "bool"))

    @classmethod
    def from_conf(cls, conf: OzoneConfiguration) -> SCMConfig:
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
    enabled: bool = dataclasses.field(default=True, metadata=cfg("hdds.scm.safemode.enabled", "bool"))
    min_datanode: int = dataclasses.field(default=1, metadata=cfg("hdds.scm.safemode.min.datanode", "int"))
    threshold_pct: float = dataclasses.field(default=0.99, metadata=cfg("hdds.scm.safemode.threshold.pct", "float"))
    healthy_pipeline_pct: float = dataclasses.field(
        default=0.10, metadata=cfg("hdds.scm.safemode.healthy.pipeline.pct", "float")
    )
    one_replica_pipeline_pct: float = dataclasses.field(
        default=0.90, metadata=cfg("hdds.scm.safemode.atleast.one.node.reported.pipeline.pct", "float")
    )
    pipeline_creation: bool = dataclasses.field(
        default=True, metadata=cfg("hdds.scm.safemode.pipeline.creation", "bool")
    )
    rule_refresh_interval: timedelta = dataclasses.field(
        default=timedelta(seconds=5), metadata=cfg("hdds.scm.safemode.rule.refresh.interval", "duration")
    )
    wait_time_after_exit: timedelta = dataclasses.field(
        default=timedelta(minutes=5), metadata=cfg("hdds.scm.wait.time.after.safemode.exit", "duration")
    )

    @classmethod
    def from_conf(cls, conf: OzoneConfiguration) -> SafeModeConfig:
        result = _build(cls, conf)
        _check_fraction(cls, result, "threshold_pct", "healthy_pipeline_pct", "one_replica_pipeline_pct")
        if result.min_datanode < 0:
            raise ConfigError("hdds.scm.safemode.min.datanode must be >= 0 (e.g. hdds.scm.safemode.min.datanode=1)")
        return result


@dataclasses.dataclass(frozen=True)
class NodeManagerConfig:
    heartbeat_interval: timedelta = dataclasses.field(
        default=timedelta(seconds=30), metadata=cfg("hdds.heartbeat.interval", "duration")
    )
    heartbeat_thread_interval: timedelta = dataclasses.field(
        default=timedelta(seconds=3), metadata=cfg("ozone.scm.heartbeat.thread.interval", "duration")
    )
    stale_node_interval: timedelta = dataclasses.field(
        default=timedelta(minutes=5), metadata=cfg("ozone.scm.stale.node.interval", "duration")
    )
    dead_node_interval: timedelta = dataclasses.field(
        default=timedelta(minutes=10), metadata=cfg("ozone.scm.dead.node.interval", "duration")
    )

    @classmethod
    def from_conf(cls, conf: OzoneConfiguration) -> NodeManagerConfig:
        result = _build(cls, conf)
        _check_positive(cls, result, "heartbeat_interval", "heartbeat_thread_interval", "stale_node_interval")
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
    creation_interval: timedelta = dataclasses.field(
        default=timedelta(seconds=120), metadata=cfg("ozone.scm.pipeline.creation.interval", "duration")
    )
    auto_create_factor_one: bool = dataclasses.field(
        default=True, metadata=cfg("ozone.scm.pipeline.creation.auto.factor.one", "bool")
    )
    datanode_pipeline_limit: int = dataclasses.field(
        default=2, metadata=cfg("ozone.scm.datanode.pipeline.limit", "int")
    )
    owner_container_count: int = dataclasses.field(
        default=3, metadata=cfg("ozone.scm.pipeline.owner.container.count", "int")
    )
    allocated_timeout: timedelta = dataclasses.field(
        default=timedelta(minutes=5), metadata=cfg("ozone.scm.pipeline.allocated.timeout", "duration")
    )
    destroy_timeout: timedelta = dataclasses.field(
        default=timedelta(seconds=66), metadata=cfg("ozone.scm.pipeline.destroy.timeout", "duration")
    )

    @classmethod
    def from_conf(cls, conf: OzoneConfiguration) -> PipelineConfig:
        result = _build(cls, conf)
        _check_positive(cls, result, "creation_interval", "datanode_pipeline_limit", "owner_container_count")
        return result


@dataclasses.dataclass(frozen=True)
class ReplicationManagerConfig:
    interval: timedelta = dataclasses.field(
        default=timedelta(seconds=300), metadata=cfg("hdds.scm.replication.thread.interval", "duration")
    )
    datanode_replication_limit: int = dataclasses.field(
        default=20, metadata=cfg("hdds.scm.replication.datanode.replication.limit", "int")
    )
    datanode_delete_limit: int = dataclasses.field(
        default=40, metadata=cfg("hdds.scm.replication.datanode.delete.container.limit", "int")
    )
    event_timeout: timedelta = dataclasses.field(
        default=timedelta(minutes=12), metadata=cfg("hdds.scm.replication.event.timeout", "duration")
    )
    maintenance_replica_minimum: int = dataclasses.field(
        default=2, metadata=cfg("hdds.scm.replication.maintenance.replica.minimum", "int")
    )
    container_sample_limit: int = dataclasses.field(
        default=100, metadata=cfg("hdds.scm.replication.container.sample.limit", "int")
    )

    @classmethod
    def from_conf(cls, conf: OzoneConfiguration) -> ReplicationManagerConfig:
        result = _build(cls, conf)
        _check_positive(cls, result, "interval", "datanode_replication_limit", "datanode_delete_limit", "event_timeout")
        return result


@dataclasses.dataclass(frozen=True)
class BlockConfig:
    deleting_service_interval: timedelta = dataclasses.field(
        default=timedelta(seconds=60), metadata=cfg("ozone.block.deleting.service.interval", "duration")
    )
    deletion_per_interval_max: int = dataclasses.field(
        default=100000, metadata=cfg("hdds.scm.block.deletion.per-interval.max", "int")
    )
    deletion_max_retry: int = dataclasses.field(
        default=4096, metadata=cfg("ozone.scm.block.deletion.max.retry", "int")
    )

    @classmethod
    def from_conf(cls, conf: OzoneConfiguration) -> BlockConfig:
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

    service_ids: tuple[str, ...] = dataclasses.field(default=(), metadata=cfg("ozone.scm.service.ids", "list"))
    default_service_id: str | None = dataclasses.field(
        default=None, metadata=cfg("ozone.scm.default.service.id", "str")
    )
    node_id: str | None = dataclasses.field(default=None, metadata=cfg("ozone.scm.node.id", "str"))
    primordial_node_id: str | None = dataclasses.field(
        default=None, metadata=cfg("ozone.scm.primordial.node.id", "str")
    )
    skip_bootstrap_validation: bool = dataclasses.field(
        default=False, metadata=cfg("ozone.scm.skip.bootstrap.validation", "bool")
    )
    leader_election_timeout: timedelta = dataclasses.field(
        default=timedelta(seconds=1), metadata=cfg("ozone.scm.ha.ratis.leader.election.timeout", "duration")
    )
    request_timeout: timedelta = dataclasses.field(
        default=timedelta(seconds=30), metadata=cfg("ozone.scm.ha.ratis.request.timeout", "duration")
    )
    ratis_storage_dir: str | None = dataclasses.field(
        default=None, metadata=cfg("ozone.scm.ha.ratis.storage.dir", "str")
    )
    ratis_snapshot_dir: str | None = dataclasses.field(
        default=None, metadata=cfg("ozone.scm.ha.ratis.snapshot.dir", "str")
    )
    snapshot_threshold: int = dataclasses.field(
        default=1000, metadata=cfg("ozone.scm.ha.ratis.snapshot.threshold", "int")
    )
    leader_ready_wait_timeout: timedelta = dataclasses.field(
        default=timedelta(seconds=60), metadata=cfg("ozone.scm.ha.ratis.leader.ready.wait.timeout", "duration")
    )
    transaction_buffer_flush_interval: timedelta = dataclasses.field(
        default=timedelta(seconds=60), metadata=cfg("ozone.scm.ha.dbtransactionbuffer.flush.interval", "duration")
    )
    service_id: str | None = None
    nodes: tuple[SCMNodeDetails, ...] = ()

    @classmethod
    def from_conf(cls, conf: OzoneConfiguration) -> SCMHAConfig:
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

    @classmethod
    def from_conf(cls, conf: OzoneConfiguration) -> SCMConfigurations:
        return cls(
            scm=SCMConfig.from_conf(conf),
            safemode=SafeModeConfig.from_conf(conf),
            node=NodeManagerConfig.from_conf(conf),
            pipeline=PipelineConfig.from_conf(conf),
            replication=ReplicationManagerConfig.from_conf(conf),
            block=BlockConfig.from_conf(conf),
            ha=SCMHAConfig.from_conf(conf),
        )
