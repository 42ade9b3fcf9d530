"""Security inside one SCM process: material, TLS, the CA, recording, reloads and renewal (edge).

Who calls it: the SCM daemon (``SCMSecurity.load`` before the facade is built, ``attach`` once it
is, ``start``/``stop`` around it) and the HA manager (its transport security and channel
credentials). It owns the background work:

* **recording** (leader only, a ``BackgroundSCMService`` that also runs in safemode): SCM
  certificates seen on calls and this SCM's own root/sub-CA go into ``validSCMCerts``; client
  certificates signed at ``--init`` into ``validCerts``;
* **reloading** (every SCM, CA mode ``operator``): the sub-CA and root files are polled every
  ``hdds.x509.subca.reload.interval``; when Kubernetes swaps the mounted Secret, the new files are
  validated and served without a restart (a broken swap is logged and the old material kept);
* **renewal** (every SCM, CA modes ``scm``/``external-root``): every ``hdds.x509.renew.check.interval``
  the sub-CA is checked against ``hdds.x509.renew.grace.duration``; a due SCM generates a new key
  and has the leader sign it (through the admin service on the leader's client port, with its
  current certificate). A leader that holds no root key first hands leadership to a follower
  (it cannot sign its own renewal). The new key and certificate are saved together and served at
  once; VERSION's ``scmCertSerialId`` follows.

The clock is injected (the facade's :class:`~scm_server.clock.Clock`), so tests drive renewal
without waiting.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import grpc
import grpc.aio
from cryptography import x509
from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from scm_server.ca.ca_server import SCMCertificateServer, certificate_record
from scm_server.clock import Clock, SystemClock
from scm_server.conf import OzoneConfiguration, SCMConfig, SCMHAConfig, SCMNodeDetails
from scm_server.conf.security import CAMode, SecurityConfig
from scm_server.exceptions import ConfigError, ResultCodes, SCMException
from scm_server.ha.scm_context import SCMContext
from scm_server.ha.scm_ha_manager_api import SCMHAManager
from scm_server.ha.scm_service import BackgroundSCMService, SCMServiceManager
from scm_server.ha.sequence_id_generator import CERTIFICATE_ID, SequenceIdGenerator
from scm_server.ha.stateful_service_state_manager import CertificateStore
from scm_server.metadata.storage_config import SCMStorageConfig
from scm_server.proto import hdds_pb2, scm_security_pb2, scm_security_pb2_grpc
from scm_server.security import init as sec_init
from scm_server.security.core import certificates as pki
from scm_server.security.core.identity import Role, has_scm_role_name, identity_of
from scm_server.security.keystore import Material, file_signature
from scm_server.security.tls import CallAuthenticator, ReloadableMaterial, SCMTransportSecurity, make_channel

LOG = logging.getLogger(__name__)

RECORDER_INTERVAL = timedelta(seconds=1)
RETIRED_REASON = pki.REASON_NAMES["cessationOfOperation"]


class RegisteredDatanode(Protocol):
    """A datanode registered with this SCM: the details it registered with."""

    @property
    def details(self) -> hdds_pb2.DatanodeDetailsProto: ...


@runtime_checkable
class RegisteredDatanodes(Protocol):
    """The datanodes registered with this SCM, as the CA checks a datanode's enrolment against them."""

    def get_node(self, dn_uuid: str) -> RegisteredDatanode | None: ...


@runtime_checkable
class SecurityHost(Protocol):
    """What the CA runtime needs of the SCM facade (:class:`scm_server.scm.StorageContainerManager`, built after
    :class:`SCMSecurity` and handed to :meth:`SCMSecurity.attach`; an import contract keeps the facade out of here).
    """

    @property
    def clock(self) -> Clock: ...

    @property
    def node_id(self) -> str | None: ...

    @property
    def certificate_store(self) -> CertificateStore: ...

    @property
    def sequence_id_generator(self) -> SequenceIdGenerator: ...

    @property
    def scm_context(self) -> SCMContext: ...

    @property
    def service_manager(self) -> SCMServiceManager: ...

    @property
    def metrics_registry(self) -> CollectorRegistry: ...

    @property
    def ha_manager(self) -> SCMHAManager: ...

    @property
    def node_manager(self) -> RegisteredDatanodes: ...


class SCMSecurity:
    def __init__(
        self,
        conf: OzoneConfiguration,
        config: SecurityConfig,
        storage: SCMStorageConfig,
        loaded: sec_init.SCMCAMaterial,
        clock: Clock | None = None,
    ) -> None:
        self.conf = conf
        self.config = config
        self.storage = storage
        self.metadata_dir = SCMConfig.from_conf(conf).metadata_dir
        self.material = ReloadableMaterial(loaded.material, scm_role_check=config.scm_role_check)
        self.root_key = loaded.root_key
        self.cluster_id = storage.cluster_id or ""
        # the clock every check reads: the given one until attach() hands over the facade's (the same
        # clock, so a peer's expiry is judged by the time the SCM keeps, not a second reading of the wall)
        self.clock: Clock = clock or SystemClock()
        self.authenticator = CallAuthenticator(
            cluster_id=lambda: self.cluster_id,
            is_revoked=lambda _serial: False,
            administrators=config.administrators,
            clock=lambda: self.clock.wall_ms() / 1000.0,
        )
        self.transport: SCMTransportSecurity | None = (
            SCMTransportSecurity(self.material, self.authenticator) if config.tls else None
        )
        self.ca: SCMCertificateServer | None = None
        self.scm: SecurityHost | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._revoked_scm_ids: frozenset[str] = frozenset()
        self._file_signature = self._watched_signature()
        self.renewals = 0
        self.reloads = 0

    # ---- construction ----
    @classmethod
    def load(
        cls, conf: OzoneConfiguration, storage: SCMStorageConfig, clock: Clock | None = None
    ) -> SCMSecurity | None:
        config = SecurityConfig.from_conf(conf)
        if not config.security_enabled:
            return None
        clock = clock or SystemClock()
        loaded = sec_init.load_scm_material(
            config, SCMConfig.from_conf(conf).metadata_dir, storage.cluster_id,
            now=datetime.fromtimestamp(clock.wall_ms() / 1000.0, UTC),
        )
        LOG.info(
            "security on (CA mode %s, mutual TLS %s): sub-CA %s, root CA %s%s",
            config.ca_mode.value,
            "on" if config.tls else "off",
            pki.describe(loaded.material.certificate),
            pki.describe(loaded.material.roots[0]),
            ", holding the root key" if loaded.root_key is not None else "",
        )
        security = cls(conf, config, storage, loaded, clock)
        if storage.scm_cert_serial_id and storage.scm_cert_serial_id != loaded.material.serial_id:
            security._note_serial(loaded.material)  # re-issued at load (role names)
        return security

    @property
    def channel_security(self) -> ReloadableMaterial | None:
        """What this SCM's own outbound channels present (None without mutual TLS)."""
        return self.material if self.config.tls else None

    def attach(self, scm: SecurityHost) -> SCMCertificateServer:
        """Bind to the facade: replicated store, sequence ids, context, clock; register the recorder."""
        self.scm = scm
        self.clock = scm.clock
        ha = SCMHAConfig.from_conf(self.conf)
        store = scm.certificate_store
        ha_manager = scm.ha_manager

        def is_member(owner: str) -> bool:
            """``owner``: an scmUuid, or (operator-issued sub-CAs) a node id, of a current ring member."""
            return owner in self._member_ids()

        self.ca = SCMCertificateServer(
            config=self.config,
            material=self.material,
            root_key=self.root_key,
            cluster_id=self.cluster_id,
            scm_id=self.storage.scm_id or "",
            node_id=scm.node_id,
            nodes=ha.nodes,
            store=store,
            next_serial=lambda: scm.sequence_id_generator.get_next_id(CERTIFICATE_ID),
            context=scm.scm_context,
            clock=scm.clock,
            is_member=is_member,
            current_nodes=self._current_nodes,
            registered_host=self._registered_host,
        )
        # a certificate superseded by a renewal stays accepted for hdds.x509.renew.overlap.duration
        self.authenticator.set_revocation_check(lambda serial: store.is_revoked(serial, now_ms=scm.clock.wall_ms()))
        self.authenticator.on_new_certificate = self.ca.saw_certificate
        recorded_ok: set[str] = set()  # fingerprints found recorded (records are never removed)

        def is_retired_issuer(serial: str) -> bool:
            record = store.revocation(serial)
            return record is not None and record.reason == RETIRED_REASON and record.nodeType == Role.SCM.value

        def is_recorded(cert: x509.Certificate) -> bool:
            fp = pki.fingerprint(cert)
            if fp in recorded_ok:
                return True
            proto = store.get_certificate(str(cert.serial_number))
            try:
                same = proto is not None and pki.fingerprint(pki.load_certificate(proto.x509Certificate)) == fp
            except pki.PKIError:
                same = False
            if same:
                recorded_ok.add(fp)
            return same

        self.authenticator.set_retired_issuer_check(is_retired_issuer, is_recorded)
        store.add_revocation_listener(lambda _records: self._refresh_revoked_scms())
        self._refresh_revoked_scms()
        if self.transport is not None:
            self.transport.set_peer_filter(lambda node_id: node_id not in self._revoked_scm_ids)
            self.transport.set_member_ids(self._member_ids)
        recorder = BackgroundSCMService(
            "CertificateRecorder",
            scm_context=scm.scm_context,
            clock=scm.clock,
            interval=RECORDER_INTERVAL,
            run_once=self._record,
            run_in_safe_mode=True,
        )
        scm.service_manager.register(recorder)
        scm.metrics_registry.register(SecurityCollector(self))
        ha_manager.set_decommission_hook(self._on_scm_removed)
        return self.ca

    def _registered_host(self, dn_uuid: str) -> str | None:
        """The host a datanode uuid is registered with on this SCM (None: not registered)."""
        info = self.scm.node_manager.get_node(dn_uuid) if self.scm is not None else None
        return str(info.details.hostName) if info is not None else None

    def _current_nodes(self) -> tuple[SCMNodeDetails, ...]:
        path = self.conf.site_xml_path
        if path is None:
            return SCMHAConfig.from_conf(self.conf).nodes
        return SCMHAConfig.from_conf(OzoneConfiguration.load(path)).nodes

    def _member_ids(self) -> dict[str, str]:
        """Every current ring member by scmUuid and by node id -> its scmUuid (Raft peer id)."""
        ha_manager = self.scm.ha_manager if self.scm is not None else None
        ring = ha_manager.ring_membership() if ha_manager is not None else None
        if ha_manager is None or ring is None:
            return {}
        out: dict[str, str] = {}
        unresolved: list[str] = []
        for member in ring.members():
            out[member] = member
            node = ha_manager.node_of_peer(member)
            if node is not None:
                out[node.node_id] = member
            else:
                unresolved.append(member)
        if unresolved:
            # a member added since this SCM loaded its configuration (scale-up): the site file names it now
            by_address = {n.ratis_address: n.node_id for n in self._current_nodes()}
            for member in unresolved:
                node_id = by_address.get(ring.address_of(member))
                if node_id is not None:
                    out.setdefault(node_id, member)
        return out

    def _refresh_revoked_scms(self) -> None:
        """The Raft peer ids whose every SCM certificate is revoked (the transport stops sending to them).
        Owners are scmUuids (CA mode scm) or node ids (operator-issued sub-CAs), resolved to peer ids now."""
        ca = self.ca
        if ca is None:
            return
        owners = {p.ownerId for p in ca.store.list_certificates(scm_certs=True) if p.ownerId}
        revoked = {o for o in owners if ca.scm_revoked(o)}
        members = self._member_ids()
        self._revoked_scm_ids = frozenset(members.get(o, o) for o in revoked)

    async def _record(self) -> None:
        ca = self.ca
        if ca is None:
            return
        await ca.record_pending()
        if ca.context.is_leader():
            await self._revoke_retired_members(ca)
        for cert in sec_init.pending_init_certificates(self.metadata_dir):
            serial = str(cert.serial_number)
            if ca.store.get_certificate(serial) is None:
                m = self.material.current
                await ca.store.store_valid_certificate(
                    certificate_record(cert, Role.CLIENT, owner_id=identity_of(cert).common_name,
                                       issuer_serial=str(m.certificate.serial_number)),
                    False,
                )
                LOG.info("recorded the client certificate serial %s signed at --init", serial)

    async def _revoke_retired_members(self, ca: SCMCertificateServer) -> None:
        """Leader, after ``scm --recover``: revoke (through Raft, cessationOfOperation) the SCM certificates of
        the members the recovery removed, then forget the note ``--recover`` left (docs/security.md)."""
        note = sec_init.load_retired_members(self.metadata_dir)
        if note is None:
            return
        members = self._member_ids()
        by = f"quorum recovery by scm:{self.storage.scm_id}"
        revoked: list[str] = []
        for scm_id in note.scm_ids:
            if scm_id not in members:
                revoked += await ca.revoke_scm(scm_id, "", by=by)
        for node_id in note.node_ids:
            # a node id is reused when the member is bootstrapped afresh: once it is a member again, its
            # certificates are the new member's (CA mode operator, where the owner is the node id)
            if node_id not in members:
                revoked += await ca.revoke_scm("", node_id, by=by)
        sec_init.clear_retired_members(self.metadata_dir)
        LOG.warning("quorum recovery: revoked the SCM certificate(s) %s of the removed members %s",
                    revoked or "(none left valid)", ", ".join((*note.scm_ids, *note.node_ids)))

    async def _on_scm_removed(self, scm_id: str, node_id: str) -> None:
        if self.ca is not None:
            await self.ca.revoke_scm(scm_id, node_id, by=f"decommission by scm:{self.storage.scm_id}")

    # ---- lifecycle ----
    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        if self.config.ca_mode is CAMode.OPERATOR:
            self._tasks.append(loop.create_task(self._reload_loop(), name="scm-security-reload"))
        else:
            self._tasks.append(loop.create_task(self._renewal_loop(), name="scm-security-renewal"))

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        self._tasks = []

    # ---- operator mode: reload swapped files ----
    def _watched_signature(self) -> tuple[tuple[str, int, int], ...]:
        c = self.config
        return file_signature(c.subca_certificate_file, c.subca_private_key_file, c.rootca_certificate_file)

    def reload_if_changed(self) -> bool:
        sig = self._watched_signature()
        if sig == self._file_signature:
            return False
        try:
            material = sec_init.load_operator_sub_ca(self.config, cluster_id=self.cluster_id, now=self.now())
        except ConfigError as exc:
            LOG.warning("the sub-CA files changed but are not usable (keeping the current ones): %s", exc)
            return False
        self._file_signature = sig
        if pki.fingerprint(material.certificate) != pki.fingerprint(self.material.current.certificate) or (
            material.roots != self.material.current.roots
        ):
            self.material.update(material)
            self._note_serial(material)
            self.reloads += 1
            return True
        return False

    async def _reload_loop(self) -> None:
        interval = self.config.subca_reload_interval.total_seconds()
        while True:
            await asyncio.sleep(interval)
            try:
                self.reload_if_changed()
            except Exception:
                LOG.exception("sub-CA reload check failed; retrying")

    # ---- scm mode: renewal ----
    def now(self) -> datetime:
        return datetime.fromtimestamp(self.clock.wall_ms() / 1000.0, UTC)

    def renewal_due(self) -> bool:
        cert = self.material.current.certificate
        if not has_scm_role_name(cert):  # issued before role-bound identities (ozone.scm.security.role.check=false)
            return True
        return pki.needs_renewal(cert, self.now(), self.config.renew_grace_duration)

    async def _renewal_loop(self) -> None:
        interval = self.config.renew_check_interval.total_seconds()
        # a certificate without role names is renewed as soon as a leader can sign it, not an interval later
        first = min(interval, 5.0) if not has_scm_role_name(self.material.current.certificate) else interval
        while True:
            await asyncio.sleep(first)
            first = interval
            try:
                await self.renew_if_due()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                LOG.warning("sub-CA renewal attempt failed (retrying in %.0fs): %s", interval, exc)

    async def renew_if_due(self) -> bool:
        """One renewal check; True if the sub-CA was renewed."""
        if not self.renewal_due():
            return False
        ca = self.ca
        scm = self.scm
        if ca is None or scm is None:
            return False
        current = self.material.current
        LOG.info("sub-CA %s is due for renewal (expires %s)", pki.describe(current.certificate),
                 current.certificate.not_valid_after_utc.isoformat())
        spec = sec_init.key_spec(self.config)
        key = await asyncio.to_thread(pki.generate_key, spec)
        csr = pki.build_csr(key, pki.SubjectInfo(identity_of(current.certificate).common_name), spec, request_ca=True)
        if scm.scm_context.is_leader():
            if self.root_key is None:
                target = await self._root_holder()
                LOG.info(
                    "leader's own sub-CA is due and this SCM holds no root key: handing leadership to %s first",
                    target or "any follower",
                )
                with contextlib.suppress(SCMException):
                    await scm.ha_manager.transfer_leadership(target)
                return False
            response = await ca.renew(pki.csr_pem(csr), identity_of(current.certificate), current.certificate)
        else:
            response = await self._renew_on_leader(pki.csr_pem(csr))
        chain = pki.load_certificates(response.x509Certificate)
        if not pki.key_matches(chain[0], key):
            raise SCMException(ResultCodes.INTERNAL_ERROR, "the leader returned a certificate for another key")
        roots = list(current.roots)
        root = pki.load_certificate(response.x509RootCACertificate)
        if root not in roots:
            roots.append(root)
        pki.verify_ca_chain(chain, roots, self.now())
        store = sec_init.sub_ca_store(self.metadata_dir, self.config)
        await asyncio.to_thread(store.save, key, chain, [root])
        material = Material(key, tuple(chain), tuple(roots))
        self.material.update(material)
        self._note_serial(material)
        self.renewals += 1
        return True

    async def _root_holder(self) -> str | None:
        """The scm id of a member that holds the root key (the primordial in CA mode scm), if any."""
        from scm_server.security.cert_client import SecurityProtocolClient

        scm = self.scm
        if scm is None:
            return None
        nodes = [n for n in SCMHAConfig.from_conf(self.conf).nodes if n.node_id != scm.node_id]
        ring = scm.ha_manager.ring_membership()
        members = ring.members() if ring is not None else ()
        for address in sec_init.security_addresses(self.conf, nodes):
            client = SecurityProtocolClient([address], roots=self.material.current.roots, rounds=1, rpc_timeout=3.0,
                                            scm_role_check=self.config.scm_role_check)
            try:
                info = await client.scm_info(address)
            except (SCMException, grpc.aio.AioRpcError, OSError):
                continue
            if info.holdsRootKey and info.scmId in members:
                return str(info.scmId)
        return None

    def _note_serial(self, material: Material) -> None:
        try:
            self.storage.set_scm_cert_serial_id(material.serial_id)
            self.storage.persist()
        except Exception as exc:  # the certificate is in use already; VERSION only records it
            LOG.warning("could not record scmCertSerialId=%s in VERSION: %s", material.serial_id, exc)

    async def _renew_on_leader(self, csr_pem: str) -> scm_security_pb2.SCMGetCertResponseProto:
        from scm_server.security.cert_client import call_on_leader

        leader = self.scm.ha_manager.leader_node() if self.scm is not None else None
        nodes = SCMHAConfig.from_conf(self.conf).nodes
        addresses = list(dict.fromkeys(([leader.client_address] if leader is not None else [])
                                       + [n.client_address for n in nodes]))
        req = scm_security_pb2.SCMRenewCertificateRequestProto(CSR=csr_pem)
        return await call_on_leader(
            addresses,
            lambda address: make_channel(address, self.material),
            lambda ch: scm_security_pb2_grpc.SCMSecurityAdminProtocolServiceStub(ch).RenewCertificate(req, timeout=30),
            rounds=2,
        )

    def certificate_files(self) -> tuple[Path, Path]:
        """(certificate chain file, private key file) this SCM's material is read from."""
        c = self.config
        if c.ca_mode is CAMode.OPERATOR and c.subca_certificate_file and c.subca_private_key_file:
            return Path(c.subca_certificate_file), Path(c.subca_private_key_file)
        store = sec_init.sub_ca_store(self.metadata_dir, c)
        return store.certificate_path, store.private_key_path

    # ---- info for status pages ----
    def summary(self) -> dict[str, Any]:
        cert = self.material.current.certificate
        return {
            "ca_mode": self.config.ca_mode.value,
            "tls": self.config.tls,
            "serial": str(cert.serial_number),
            "subject": cert.subject.rfc4514_string(),
            "issuer": cert.issuer.rfc4514_string(),
            "not_after": cert.not_valid_after_utc.isoformat(),
            "holds_root_key": self.root_key is not None,
            "renewals": self.renewals,
            "reloads": self.reloads,
        }


class SecurityCollector(Collector):
    """``/prom``: this SCM's certificate expiry, issued/revoked counts, renewals/reloads, refused calls."""

    def __init__(self, security: SCMSecurity) -> None:
        self._security = security

    def collect(self) -> Iterator[Metric]:
        sec = self._security
        cert = sec.material.current.certificate
        yield GaugeMetricFamily(
            "scm_certificate_expiry_timestamp_seconds", "notAfter of this SCM's own (sub-CA) certificate",
            value=cert.not_valid_after_utc.timestamp(),
        )
        ca = sec.ca
        if ca is not None:
            yield CounterMetricFamily("scm_certificates_issued", "Certificates this SCM issued as leader",
                                      value=ca.issued_count)
            yield GaugeMetricFamily("scm_certificates_revoked", "Revoked serials in the replicated revocation set",
                                    value=len(ca.store.revoked_serials()))
            limited = CounterMetricFamily("scm_enrollment_rate_limited",
                                          "Enrolment requests refused by the rate limits", labels=["limit"])
            for limit, count in sorted(ca.rate_limiter.refused.items()):
                limited.add_metric([limit], count)
            yield limited
        yield CounterMetricFamily("scm_certificate_renewals", "Renewals of this SCM's sub-CA", value=sec.renewals)
        yield CounterMetricFamily("scm_certificate_reloads", "Reloads of swapped sub-CA files", value=sec.reloads)
        refused = CounterMetricFamily("scm_tls_calls_refused", "Calls refused after the handshake", labels=["result"])
        for result, count in sorted(sec.authenticator.refused.items()):
            refused.add_metric([result], count)
        yield refused


def leaf_of_context(context: grpc.aio.ServicerContext[Any, Any]) -> x509.Certificate | None:
    pems = context.auth_context().get("x509_pem_cert")
    if not pems:
        return None
    return x509.load_pem_x509_certificate(pems[0])
