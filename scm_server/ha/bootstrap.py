"""``ozone-scm scm --init`` and ``ozone-scm scm --bootstrap``: preparing an SCM's storage for HA.

This is Ozone's ``StorageContainerManager.scmInit`` / ``scmBootstrap`` (ozone-scm.md §1.3-1.4),
called by the CLI (``scm --init [--clusterid]`` / ``scm --bootstrap``) and by the local cluster
and the Kubernetes operator, which run BOTH commands on EVERY node ("auto-bootstrap"): with
``ozone.scm.primordial.node.id`` set, each node skips what does not apply to it.

* ``scm_init`` on the primordial SCM (matched by node id or hostname) creates the cluster id
  (``CID-<uuid>``) and this SCM's ``scmUuid`` (= its Raft peer id), writes ``VERSION``
  (``primaryScmNodeId`` = itself, ``scmHA=true``) **before** it initialises the one-member Raft
  group, so a retry after a crash reuses the cluster id instead of leaving a second group dir.
  Re-running it is a no-op (it only completes a Raft group that a crash left half-made).
* ``scm_bootstrap`` on any other SCM asks the running SCMs for the cluster id
  (``InterSCMProtocolService.GetScmInfo``, falling back to the client protocol's ``GetScmInfo``)
  and writes ``VERSION``; it does **not** join the Raft ring: the node asks the leader to add it
  (``AddSCM``) on its first start (``SCMHAManagerImpl.start``).

Pain points fixed here (ozone-scm.md §10):

* HDDS-5062 (bootstrap loops when every node restarts and there is no leader): the cluster id is
  immutable, so our ``GetScmInfo`` is answered by ANY initialised SCM, leader or not; and an
  already-bootstrapped node whose peers cannot be reached at all proceeds with its persisted
  cluster id after a bounded number of attempts (it was validated on its first bootstrap; the
  leader re-checks it on ``AddSCM`` and datanodes on register). A different cluster id from a peer
  is still refused ("Could not bootstrap as SCM is already initialized with cluster id ...").
  ``ozone.scm.skip.bootstrap.validation=true`` skips the check altogether, as in Ozone.
* HDDS-13886 (a typo'd ``ozone.scm.service.id`` gave "Failed to get SCM info"): the config layer
  names the typo; a node whose identity cannot be determined gets an error saying which keys to set.
* Bounded retries everywhere, each failure message names the addresses tried and the last error.

Node identity: ``ozone.scm.node.id``; otherwise the configured node whose ``ozone.scm.address``
resolves to a local hostname/address (an error if none or several match, e.g. all on 127.0.0.1).

Security (``ozone.security.enabled=true``, :mod:`scm_server.security.init`): ``--init`` creates
the root CA and the primordial's sub-CA (or validates externally issued ones) BEFORE writing
VERSION, which records ``scmCertSerialId``; ``--bootstrap`` asks the peers' security ports for the
cluster id (trusting the root CA from ``hdds.x509.rootca.certificate.file``, or from the SCM's
proof of the enrolment secret), then has the leader sign its sub-CA, then writes VERSION. The command
parses the security configuration once (:meth:`SecurityConfig.if_enabled`, None with security off) and
hands that object to ``scm_init``/``scm_bootstrap`` and on to every security step.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import socket
import uuid
from collections.abc import Sequence
from pathlib import Path

import grpc

from scm_server import hdds_layout as layout
from scm_server.conf import OzoneConfiguration, SCMConfig, SCMHAConfig, SCMNodeDetails
from scm_server.conf.addresses import parse_port
from scm_server.conf.security import SecurityConfig
from scm_server.exceptions import ConfigError, SCMError, StorageError
from scm_server.metadata.storage_config import SCMStorageConfig, validate_cluster_id

LOG = logging.getLogger(__name__)

CLUSTER_ID_PREFIX = "CID-"
RATIS_DIR_NAME = "scm.ratis"

# Bootstrap retry policy (bounded): rounds over all peers, backoff doubling up to a cap.
BOOTSTRAP_ROUNDS = 10
BOOTSTRAP_ROUNDS_ALREADY_INITIALIZED = 3
BOOTSTRAP_RPC_TIMEOUT = 3.0
BOOTSTRAP_BACKOFF_START = 0.5
BOOTSTRAP_BACKOFF_MAX = 4.0


class BootstrapError(SCMError):
    """Init/bootstrap cannot proceed; the message says why and what to do."""


# ---------------------------------------------------------------------------------------------
# node identity and directories
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class LocalSCM:
    """Who this SCM is in its HA service, and where its HA state lives."""

    ha: SCMHAConfig
    scm: SCMConfig
    node: SCMNodeDetails | None  # None: no HA service configured (a single SCM)
    single_ratis_port: int = 9894  # ozone.scm.ratis.port, used when node is None
    single_grpc_port: int = 9895  # ozone.scm.grpc.port, used when node is None

    @property
    def node_id(self) -> str | None:
        return self.node.node_id if self.node else None

    @property
    def peers(self) -> tuple[SCMNodeDetails, ...]:
        if self.node is None:
            return ()
        return tuple(n for n in self.ha.nodes if n.node_id != self.node.node_id)

    def is_primordial(self) -> bool:
        """Ozone's ``SCMHAUtils.isPrimordialSCM``: by node id or by hostname."""
        primordial = self.ha.primordial_node_id
        if primordial is None:
            return False
        if self.node is not None:
            return primordial in (self.node.node_id, self.node.host)
        return primordial in _local_names()

    @property
    def ratis_dir(self) -> Path:
        """``ozone.scm.ha.ratis.storage.dir``, default ``<ozone.metadata.dirs>/scm.ratis``."""
        if self.ha.ratis_storage_dir:
            return Path(self.ha.ratis_storage_dir)
        return self.scm.metadata_dir / RATIS_DIR_NAME

    def raft_group_dir(self, cluster_id: str) -> Path:
        """The Raft storage of this SCM's group: the group id is the cluster id without ``CID-``."""
        return self.ratis_dir / raft_group_id(cluster_id)

    @property
    def snapshot_dir(self) -> Path:
        """``ozone.scm.ha.ratis.snapshot.dir``: where downloaded checkpoints are unpacked."""
        if self.ha.ratis_snapshot_dir:
            return Path(self.ha.ratis_snapshot_dir)
        return self.scm.metadata_dir / "scm.ratis.snapshot"

    @property
    def ratis_address(self) -> str:
        if self.node is None:
            return f"{_single_host(self.scm)}:{self.single_ratis_port}"
        return self.node.ratis_address

    @property
    def grpc_address(self) -> str:
        if self.node is None:
            return f"{_single_host(self.scm)}:{self.single_grpc_port}"
        return self.node.grpc_address


def raft_group_id(cluster_id: str) -> str:
    return cluster_id[len(CLUSTER_ID_PREFIX) :] if cluster_id.startswith(CLUSTER_ID_PREFIX) else cluster_id


def _single_host(scm: SCMConfig) -> str:
    if scm.client_address:
        return scm.client_address.split(":")[0]
    if scm.scm_names:
        return scm.scm_names[0].split(":")[0]
    return "localhost"


def _local_names() -> set[str]:
    names = {socket.gethostname(), socket.getfqdn(), "localhost"}
    addrs: set[str] = set()
    for name in list(names):
        try:
            for info in socket.getaddrinfo(name, None):
                addrs.add(str(info[4][0]))
        except OSError:
            continue
    return names | addrs


def _resolves_locally(host: str, local: set[str]) -> bool:
    if host in local:
        return True
    try:
        return any(str(info[4][0]) in local for info in socket.getaddrinfo(host, None))
    except OSError:
        return False


def resolve_local_scm(conf: OzoneConfiguration) -> LocalSCM:
    """Determine this SCM's node in the HA service (``ozone.scm.node.id`` or address matching)."""
    ha = SCMHAConfig.from_conf(conf)
    scm = SCMConfig.from_conf(conf)
    if not ha.is_ha_configured:
        return LocalSCM(
            ha=ha,
            scm=scm,
            node=None,
            single_ratis_port=parse_port("ozone.scm.ratis.port", conf.get_str("ozone.scm.ratis.port") or "9894"),
            single_grpc_port=parse_port("ozone.scm.grpc.port", conf.get_str("ozone.scm.grpc.port") or "9895"),
        )
    if ha.node_id is not None:
        return LocalSCM(ha=ha, scm=scm, node=ha.node(ha.node_id))
    local = _local_names()
    matches = [n for n in ha.nodes if _resolves_locally(n.host, local)]
    if len(matches) == 1:
        return LocalSCM(ha=ha, scm=scm, node=matches[0])
    sid = ha.service_id
    if not matches:
        raise ConfigError(
            f"cannot tell which SCM of service {sid} this is: none of the addresses "
            f"{', '.join(f'ozone.scm.address.{sid}.{n.node_id}={n.host}' for n in ha.nodes)} is local; "
            f"set ozone.scm.node.id (e.g. ozone.scm.node.id={ha.nodes[0].node_id})"
        )
    raise ConfigError(
        f"cannot tell which SCM of service {sid} this is: several configured SCMs are local "
        f"({', '.join(n.node_id for n in matches)}); set ozone.scm.node.id (e.g. ozone.scm.node.id="
        f"{matches[0].node_id})"
    )


# ---------------------------------------------------------------------------------------------
# VERSION file access (SCMStorageConfig belongs to the metadata layer)
# ---------------------------------------------------------------------------------------------


def _storage(local: LocalSCM) -> SCMStorageConfig:
    return SCMStorageConfig(local.scm.scm_db_dir)


def normalize_cluster_id(cluster_id: str) -> str:
    """``--clusterid`` accepts ``CID-<uuid>`` or a bare UUID; stored as ``CID-<uuid>``."""
    try:
        return validate_cluster_id(cluster_id.strip())
    except StorageError as exc:
        raise BootstrapError(f"--clusterid: {exc}") from exc


def _raft_group_initialized(group_dir: Path) -> bool:
    return group_dir.is_dir() and any(group_dir.iterdir())


def _initialize_raft_group(local: LocalSCM, cluster_id: str, scm_id: str) -> None:
    from scm_server.raft.server import RaftServer

    group_dir = local.raft_group_dir(cluster_id)
    group_dir.mkdir(parents=True, exist_ok=True)
    RaftServer.initialize_group(group_dir, scm_id, local.ratis_address)
    local.snapshot_dir.mkdir(parents=True, exist_ok=True)


# ---------------------------------------------------------------------------------------------
# scm --init
# ---------------------------------------------------------------------------------------------


def _security_enabled(conf: OzoneConfiguration) -> bool:
    return bool(conf.get_bool("ozone.security.enabled", False))


def _hostname(local: LocalSCM) -> str:
    return local.node.host if local.node is not None else _single_host(local.scm)


def _init_security_primordial(
    security: SecurityConfig | None, local: LocalSCM, cluster_id: str, scm_id: str
) -> str | None:
    if security is None:
        return None
    from scm_server.security.init import initialize_primordial

    try:
        return initialize_primordial(
            security, metadata_dir=local.scm.metadata_dir, cluster_id=cluster_id, scm_id=scm_id,
            hostname=_hostname(local), member_hosts={n.node_id: n.host for n in local.ha.nodes},
        )
    except (ConfigError, ValueError) as exc:
        raise BootstrapError(f"SCM init failed: security: {exc}") from exc


def _init_layout_version(conf: OzoneConfiguration) -> int:
    """The layout version a new cluster starts at: testing.hdds.scm.init.layout.version, or the newest."""
    wanted = SCMConfig.from_conf(conf).init_layout_version
    if wanted == -1:
        return layout.SOFTWARE_LAYOUT_VERSION
    if not 0 <= wanted <= layout.SOFTWARE_LAYOUT_VERSION:
        raise StorageError(
            f"testing.hdds.scm.init.layout.version={wanted} is not an HDDS layout version this SCM knows: "
            f"use -1 (the newest) or 0..{layout.SOFTWARE_LAYOUT_VERSION}"
        )
    return wanted


def scm_init(conf: OzoneConfiguration, cluster_id: str | None = None, *, security: SecurityConfig | None) -> bool:
    """``ozone-scm scm --init``: returns True on success (also when there was nothing to do). ``security``: the
    command's security configuration, parsed once (:meth:`SecurityConfig.if_enabled`; None with security off)."""
    local = resolve_local_scm(conf)
    if local.ha.primordial_node_id is not None and not local.is_primordial():
        LOG.info(
            "SCM init command can only be executed on Primordial SCM (ozone.scm.primordial.node.id=%s, "
            "this SCM is %s); nothing to do",
            local.ha.primordial_node_id,
            local.node_id,
        )
        return True
    storage = _storage(local)
    if storage.is_initialized:
        existing = storage.cluster_id
        if cluster_id is not None and normalize_cluster_id(cluster_id) != existing:
            LOG.warning("SCM already initialized; ignoring --clusterid %s and reusing cluster id %s", cluster_id, existing)
        assert existing is not None and storage.scm_id is not None
        group_dir = local.raft_group_dir(existing)
        if not _raft_group_initialized(group_dir) and storage.primary_scm_node_id in (None, "", storage.scm_id):
            # A crash between writing VERSION and creating the Raft group: finish the job.
            LOG.info("SCM %s initialized but its Raft group is missing; initializing it now", storage.scm_id)
            _initialize_raft_group(local, existing, storage.scm_id)
        if not storage.scm_ha:
            storage.set_scm_ha(True)
            storage.persist()
        if storage.primary_scm_node_id in (None, "", storage.scm_id):
            # Security enabled after the first --init, or completing an interrupted one.
            serial = _init_security_primordial(security, local, existing, storage.scm_id)
            if serial is not None and serial != storage.scm_cert_serial_id:
                storage.set_scm_cert_serial_id(serial)
                storage.persist()
        LOG.info(
            "SCM already initialized. Reusing existing cluster id: %s, SCM id: %s, primary SCM: %s",
            existing,
            storage.scm_id,
            storage.primary_scm_node_id,
        )
        return True
    cid = normalize_cluster_id(cluster_id) if cluster_id is not None else f"{CLUSTER_ID_PREFIX}{uuid.uuid4()}"
    scm_id = str(uuid.uuid4())
    # Security before VERSION (as Ozone): VERSION then records scmCertSerialId.
    serial = _init_security_primordial(security, local, cid, scm_id)
    if serial is not None:
        storage.set_scm_cert_serial_id(serial)
    storage.layout_version = _init_layout_version(conf)
    # VERSION before Raft: a retry after a crash reuses this cluster id.
    storage.initialize(cluster_id=cid, scm_id=scm_id, primary_scm_node_id=scm_id, scm_ha=True)
    _initialize_raft_group(local, cid, scm_id)
    LOG.info("SCM initialization succeeded. Current cluster id: %s, SCM id: %s", cid, scm_id)
    return True


# ---------------------------------------------------------------------------------------------
# scm --bootstrap
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ScmInfo:
    cluster_id: str
    scm_id: str
    answered_by: str  # address that answered


async def _get_scm_info_once(peer: SCMNodeDetails, timeout: float) -> ScmInfo:
    """Ask one SCM: the inter-SCM service first (leaderless), then the block client protocol."""
    from scm_server.proto import scm_client_pb2, scm_client_pb2_grpc, scm_ha_pb2, scm_ha_pb2_grpc

    errors: list[str] = []
    async with grpc.aio.insecure_channel(peer.grpc_address) as ch:
        try:
            resp = await scm_ha_pb2_grpc.InterSCMProtocolServiceStub(ch).GetScmInfo(
                scm_ha_pb2.ScmInfoRequestProto(), timeout=timeout
            )
            return ScmInfo(resp.clusterId, resp.scmId, peer.grpc_address)
        except grpc.aio.AioRpcError as exc:
            errors.append(f"{peer.grpc_address}: {exc.code().name} {exc.details()}")
    async with grpc.aio.insecure_channel(peer.block_client_address) as ch:
        try:
            bresp = await scm_client_pb2_grpc.ScmBlockLocationProtocolServiceStub(ch).GetScmInfo(
                scm_client_pb2.GetScmInfoRequestProto(), timeout=timeout
            )
            return ScmInfo(bresp.clusterId, bresp.scmId, peer.block_client_address)
        except grpc.aio.AioRpcError as exc:
            errors.append(f"{peer.block_client_address}: {exc.code().name} {exc.details()}")
    raise ConnectionError("; ".join(errors))


async def fetch_scm_info(
    peers: Sequence[SCMNodeDetails],
    *,
    rounds: int = BOOTSTRAP_ROUNDS,
    rpc_timeout: float = BOOTSTRAP_RPC_TIMEOUT,
    backoff_start: float = BOOTSTRAP_BACKOFF_START,
    backoff_max: float = BOOTSTRAP_BACKOFF_MAX,
) -> tuple[ScmInfo | None, list[str]]:
    """Try every peer, ``rounds`` times with a capped backoff; (info or None, errors seen)."""
    errors: list[str] = []
    delay = backoff_start
    for attempt in range(1, rounds + 1):
        for peer in peers:
            try:
                return await _get_scm_info_once(peer, rpc_timeout), errors
            except (ConnectionError, OSError) as exc:
                errors.append(f"attempt {attempt}, SCM {peer.node_id}: {exc}")
        if attempt < rounds:
            LOG.info("no SCM answered GetScmInfo (attempt %d/%d); retrying in %.1fs", attempt, rounds, delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, backoff_max)
    return None, errors


def _init_security_bootstrap(
    conf: OzoneConfiguration, security: SecurityConfig, local: LocalSCM, cluster_id: str, scm_id: str, rounds: int
) -> str | None:
    """The bootstrapping SCM's sub-CA (validated files or a CSR signed by the leader); None on failure."""
    from scm_server.security.init import initialize_bootstrap

    assert local.node is not None
    try:
        return initialize_bootstrap(
            conf,
            security,
            metadata_dir=local.scm.metadata_dir,
            cluster_id=cluster_id,
            scm_id=scm_id,
            node=local.node,
            peers=local.peers,
            rounds=rounds,
        )
    except (ConfigError, ValueError, SCMError) as exc:
        LOG.error("scm bootstrap failed: security: %s", exc)
        return None


def scm_bootstrap(
    conf: OzoneConfiguration,
    *,
    security: SecurityConfig | None,
    rounds: int | None = None,
    rpc_timeout: float = BOOTSTRAP_RPC_TIMEOUT,
    termination_log: Path | None = None,
) -> bool:
    """``ozone-scm scm --bootstrap``: returns True on success (also when there was nothing to do). When the volume
    holds another cluster's data, one fixed-format line goes to ``termination_log`` too (a Kubernetes termination
    message: ``ForeignVolume: this volume holds cluster <id>; the running SCMs are cluster <id>``), which an
    operator reads whole, unlike a log tail. ``security``: the command's security configuration, parsed once
    (:meth:`SecurityConfig.if_enabled`; None with security off)."""
    local = resolve_local_scm(conf)
    if local.ha.primordial_node_id is not None and local.is_primordial():
        LOG.info(
            "SCM bootstrap command can only be executed in non-Primordial SCM (this SCM %s is the primordial "
            "node ozone.scm.primordial.node.id=%s); nothing to do",
            local.node_id,
            local.ha.primordial_node_id,
        )
        return True
    storage = _storage(local)
    initialized = storage.is_initialized
    if initialized and local.ha.skip_bootstrap_validation:
        LOG.info(
            "SCM already initialized with cluster id %s and ozone.scm.skip.bootstrap.validation=true; "
            "skipping the cluster id check",
            storage.cluster_id,
        )
        return True
    if not local.peers and initialized:
        # A single SCM (no HA service configured) that --init already set up: running --init and
        # --bootstrap on every node, as Ozone's Kubernetes example does, must also work for one node.
        LOG.info(
            "SCM already initialized with cluster id %s and no other SCM is configured; nothing to bootstrap",
            storage.cluster_id,
        )
        return True
    if not local.peers:
        LOG.error(
            "scm bootstrap failed: no other SCM is configured to fetch the cluster id from; list the SCMs in "
            "ozone.scm.service.ids / ozone.scm.nodes.<serviceId> / ozone.scm.address.<serviceId>.<nodeId>, "
            "or run `ozone-scm scm --init` if this is the first SCM"
        )
        return False
    if rounds is None:
        rounds = BOOTSTRAP_ROUNDS_ALREADY_INITIALIZED if initialized else BOOTSTRAP_ROUNDS
    if security is not None:
        from scm_server.security.init import fetch_scm_info_secure

        try:
            secure_info = fetch_scm_info_secure(conf, security, local.peers, local.scm.metadata_dir, rounds)
        except (ConfigError, ValueError, SCMError) as exc:
            LOG.error("scm bootstrap failed: security: %s", exc)
            return False
        info = ScmInfo(secure_info.cluster_id, secure_info.scm_id, secure_info.answered_by) if secure_info else None
        errors = [] if secure_info else ["no SCM security service answered (see the warnings above)"]
    else:
        info, errors = asyncio.run(fetch_scm_info(local.peers, rounds=rounds, rpc_timeout=rpc_timeout))
    if info is None:
        tried = ", ".join(f"{p.node_id}@{p.grpc_address}" for p in local.peers)
        if initialized:
            # HDDS-5062: every SCM restarting at once must not loop; the id was validated before.
            LOG.warning(
                "could not reach any other SCM (%s) to validate cluster id %s; this SCM was bootstrapped "
                "before, so it proceeds with its persisted cluster id (the leader re-checks it when adding "
                "this SCM). Last error: %s",
                tried,
                storage.cluster_id,
                errors[-1] if errors else "none",
            )
            return True
        LOG.error(
            "scm bootstrap failed: could not get the cluster id from any running SCM (%s) after %d rounds; "
            "start the primordial SCM first (`ozone-scm scm --init` then `ozone-scm scm`). Last error: %s",
            tried,
            rounds,
            errors[-1] if errors else "none",
        )
        return False
    if initialized:
        if info.cluster_id != storage.cluster_id:
            if termination_log is not None:
                with contextlib.suppress(OSError):
                    termination_log.write_text(
                        f"ForeignVolume: this volume holds cluster {storage.cluster_id}; the running SCMs are cluster "
                        f"{info.cluster_id}\n"
                    )
            LOG.error(
                "Could not bootstrap as SCM is already initialized with cluster id %s but the running SCMs "
                "(%s) have cluster id %s. Wipe this SCM's metadata dirs (ozone.metadata.dirs, "
                "ozone.scm.db.dirs, ozone.scm.ha.ratis.storage.dir) and bootstrap again.",
                storage.cluster_id,
                info.answered_by,
                info.cluster_id,
            )
            return False
        if security is not None:
            assert storage.scm_id is not None
            serial = _init_security_bootstrap(conf, security, local, info.cluster_id, storage.scm_id, rounds)
            if serial is None:
                return False
            if serial != storage.scm_cert_serial_id:
                storage.set_scm_cert_serial_id(serial)
                storage.persist()
        LOG.info("SCM already bootstrapped into cluster %s (SCM id %s)", storage.cluster_id, storage.scm_id)
        return True
    scm_id = str(uuid.uuid4())
    if security is not None:
        from scm_server.security.init import existing_bootstrap_identity

        # a crash after the certificate was issued but before VERSION: keep that identity
        scm_id = existing_bootstrap_identity(local.scm.metadata_dir, security, info.cluster_id) or scm_id
        serial = _init_security_bootstrap(conf, security, local, info.cluster_id, scm_id, rounds)
        if serial is None:
            return False
        storage.set_scm_cert_serial_id(serial)
    storage.layout_version = _init_layout_version(conf)  # as Ozone: the same key as the primordial's --init
    storage.initialize(cluster_id=info.cluster_id, scm_id=scm_id, primary_scm_node_id=info.scm_id, scm_ha=True)
    local.raft_group_dir(info.cluster_id).mkdir(parents=True, exist_ok=True)
    local.snapshot_dir.mkdir(parents=True, exist_ok=True)
    LOG.info(
        "SCM bootstrap succeeded: cluster id %s (from %s), SCM id %s; it joins the Raft ring on its first start",
        info.cluster_id,
        info.answered_by,
        scm_id,
    )
    return True
