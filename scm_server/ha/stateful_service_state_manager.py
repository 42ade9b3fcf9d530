"""Replicated state of SCM's smaller replicated services (Ozone's StatefulServiceStateManager,
FinalizationStateManager and the CertificateStore's DB side).

* ``StatefulServiceStateManager`` (RequestType.STATEFUL_SERVICE_CONFIG): persisted configuration
  of a stateful service, e.g. ContainerBalancer, as serialized proto bytes in
  ``statefulServiceConfig``.
* ``FinalizationStateManager`` (RequestType.FINALIZE): the ``#FINALIZING`` mark and the finalized
  ``#LAYOUTVERSION`` in the ``meta`` table (upgrade finalization).
* ``CertificateStore`` (RequestType.CERT_STORE): issued certificates in ``validCerts`` (OM/DN/clients)
  and ``validSCMCerts`` (SCM root / sub-CA). Serial ids come from the ``CertificateId`` sequence.
  Revocations go to our own ``revokedCertificates`` table (Ozone removed its ``revokedCerts`` /
  ``crls`` tables in HDDS-10889); the revoked serials are also kept in memory, because the TLS
  layer asks on every call.

All mutations follow the ``@replicate`` rules (deterministic, idempotent, proto/scalar args).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol

from scm_server import hdds_layout as layout
from scm_server.exceptions import ResultCodes, SCMException
from scm_server.ha.replicate import RequestType, replicate
from scm_server.ha.scm_ha_manager_api import SCMHAManager
from scm_server.ha.state_manager import ReplicatedStateManager
from scm_server.ha.transaction_buffer import SCMHADBTransactionBuffer
from scm_server.metadata import SCMMetadataStore
from scm_server.metadata.scm_db_definition import FINALIZING_KEY, LAYOUT_VERSION_KEY
from scm_server.proto import hdds_pb2
from scm_server.security.core import certificates as pki
from scm_server.security.core import serials as serial_ids

log = logging.getLogger(__name__)


class StatefulServiceStateManager(ReplicatedStateManager):
    _configs: dict[str, bytes]

    def reinitialize(self) -> None:
        self._configs = dict(self._store.stateful_service_config.items())

    def read_configuration(self, service_name: str) -> bytes | None:
        return self._configs.get(service_name)

    @replicate(RequestType.STATEFUL_SERVICE_CONFIG)
    def save_configuration(self, service_name: str, data: bytes) -> None:
        if not service_name:
            raise SCMException(ResultCodes.INVALID_REQUEST, "stateful service name must not be empty")
        self._configs[service_name] = bytes(data)
        self._buffer.add_to_buffer(self._store.stateful_service_config, service_name, bytes(data))

    @replicate(RequestType.STATEFUL_SERVICE_CONFIG)
    def delete_configuration(self, service_name: str) -> None:
        if self._configs.pop(service_name, None) is not None:
            self._buffer.remove_from_buffer(self._store.stateful_service_config, service_name)


class FinalizationListener(Protocol):
    """What happens beside the replicated state when finalization crosses a step (Ozone's upgrade context):
    called on every SCM, while the entry is applied."""

    def on_checkpoint(self, checkpoint: layout.FinalizationCheckpoint) -> None: ...

    def on_layout_finalized(self, feature: layout.LayoutFeature) -> None: ...


class FinalizationStateManager(ReplicatedStateManager):
    """The replicated half of upgrade finalization: the ``#FINALIZING`` mark and the metadata layout version
    (MLV) in ``meta``. Which checkpoint SCM is at follows from them alone (:mod:`scm_server.hdds_layout`).
    Until a feature was finalized through Raft the MLV is the one VERSION records (``initial_layout_version``)."""

    def __init__(
        self,
        store: SCMMetadataStore,
        buffer: SCMHADBTransactionBuffer,
        ha_manager: SCMHAManager | None,
        initial_layout_version: int = layout.SOFTWARE_LAYOUT_VERSION,
        software_layout_version: int = layout.SOFTWARE_LAYOUT_VERSION,
    ) -> None:
        if initial_layout_version > software_layout_version:
            raise SCMException(
                ResultCodes.INVALID_REQUEST,
                f"metadata layout version {initial_layout_version} is newer than this software's "
                f"({software_layout_version}): run the SCM release that wrote this metadata, or a newer one",
            )
        self.software_layout_version = software_layout_version
        self._initial_layout_version = initial_layout_version
        self._listener: FinalizationListener | None = None
        super().__init__(store, buffer, ha_manager)

    def reinitialize(self) -> None:
        self._finalizing = self._store.meta.get(FINALIZING_KEY) is not None
        stored = self._store.meta.get(LAYOUT_VERSION_KEY)
        self._layout_version = int(stored) if stored is not None else self._initial_layout_version
        if self._listener is not None:
            self._listener.on_checkpoint(self.checkpoint())

    def set_listener(self, listener: FinalizationListener) -> None:
        """The upgrade context: told the current checkpoint now and every crossing after."""
        self._listener = listener
        listener.on_checkpoint(self.checkpoint())

    @property
    def metadata_layout_version(self) -> int:
        return self._layout_version

    def is_finalizing(self) -> bool:
        return self._finalizing

    def needs_finalization(self) -> bool:
        return self._layout_version < self.software_layout_version

    def checkpoint(self) -> layout.FinalizationCheckpoint:
        return layout.checkpoint_of(self._finalizing, self.needs_finalization())

    def _publish(self, checkpoint: layout.FinalizationCheckpoint) -> None:
        log.info("SCM finalization has crossed checkpoint %s", checkpoint.name)
        if self._listener is not None:
            self._listener.on_checkpoint(checkpoint)

    @replicate(RequestType.FINALIZE)
    def add_finalizing_mark(self) -> None:
        self._finalizing = True
        self._buffer.add_to_buffer(self._store.meta, FINALIZING_KEY, "")
        self._publish(self.checkpoint())

    @replicate(RequestType.FINALIZE)
    def remove_finalizing_mark(self) -> None:
        self._finalizing = False
        self._buffer.remove_from_buffer(self._store.meta, FINALIZING_KEY)
        checkpoint = self.checkpoint()
        if checkpoint is not layout.FinalizationCheckpoint.FINALIZATION_COMPLETE:
            log.error("SCM upgrade finalization is in an unknown state: expected FINALIZATION_COMPLETE, was %s",
                      checkpoint.name)
        self._publish(checkpoint)

    @replicate(RequestType.FINALIZE)
    def finalize_layout_feature(self, layout_version: int) -> None:
        if layout_version > self.software_layout_version:
            raise SCMException(
                ResultCodes.INVALID_REQUEST,
                f"cannot finalize layout version {layout_version}: this SCM software supports "
                f"up to {self.software_layout_version}",
            )
        if layout_version <= self._layout_version:
            return  # already finalized: the entry is applied again after a restart
        if layout_version != self._layout_version + 1:
            raise SCMException(
                ResultCodes.INVALID_REQUEST,
                f"cannot finalize layout version {layout_version}: the next feature to finalize is "
                f"{self._layout_version + 1} (features are finalized one at a time, in order)",
            )
        self._layout_version = layout_version
        self._buffer.add_to_buffer(self._store.meta, LAYOUT_VERSION_KEY, str(layout_version))
        if self._listener is not None:
            self._listener.on_layout_finalized(layout.feature(layout_version))
        if not self.needs_finalization():
            self._publish(layout.FinalizationCheckpoint.MLV_EQUALS_SLV)


class CertificateIndex:
    """In-memory lookups over validCerts + validSCMCerts, built once (each certificate parsed once)
    and kept current as certificates are stored: by public key (the anonymous ``GetCertificate``), by
    owner (the enrolment duplicate checks), and each certificate's notAfter."""

    def __init__(self) -> None:
        self.by_key: dict[str, hdds_pb2.CertificateProto] = {}
        self.by_owner: dict[tuple[str, str], list[str]] = {}
        self.not_after_ms: dict[str, int] = {}

    def add(self, proto: hdds_pb2.CertificateProto) -> None:
        try:
            cert = pki.load_certificate(proto.x509Certificate)
        except pki.PKIError:
            return
        self.by_key[pki.public_key_sha256(cert)] = proto
        serials = self.by_owner.setdefault((proto.nodeType, proto.ownerId), [])
        if proto.serialId not in serials:
            serials.append(proto.serialId)
        self.not_after_ms[proto.serialId] = int(cert.not_valid_after_utc.timestamp() * 1000)


class CertificateStore(ReplicatedStateManager):
    def __init__(
        self, store: SCMMetadataStore, buffer: SCMHADBTransactionBuffer, ha_manager: SCMHAManager | None
    ) -> None:
        self._revoked: dict[str, hdds_pb2.RevokedCertificateProto] = {}
        self._listeners: list[Callable[[list[hdds_pb2.RevokedCertificateProto]], None]] = []
        self._index: CertificateIndex | None = None
        super().__init__(store, buffer, ha_manager)

    def reinitialize(self) -> None:
        """Reload the in-memory revocation set (certificates are read from the tables directly).

        Serials are kept in their canonical form (decimal, no leading zero). A record stored before
        serials were canonical (``0123``, non-ASCII digits) is kept as stored and takes effect under
        the serial it names, so what an administrator once revoked stays revoked."""
        revoked: dict[str, hdds_pb2.RevokedCertificateProto] = {}
        for key, record in self._store.revoked_certs.items():
            canonical = key if serial_ids.is_canonical(key) else serial_ids.legacy_serial(key)
            if canonical is None:
                log.warning("revokedCertificates: ignoring a record under %r, which names no serial number", key)
                continue
            if canonical != key:
                log.warning("revokedCertificates: the record under %r (stored before serials were canonical) "
                            "revokes serial %s", key, canonical)
                copy = hdds_pb2.RevokedCertificateProto()
                copy.CopyFrom(record)
                copy.serialId = canonical
                record = copy
            revoked.setdefault(canonical, record)
        self._revoked = revoked
        self._index = None
        self._notify(list(self._revoked.values()))

    def add_revocation_listener(self, listener: Callable[[list[hdds_pb2.RevokedCertificateProto]], None]) -> None:
        """Called (on the applying thread, must not block) with newly applied revocations."""
        self._listeners.append(listener)

    def _notify(self, records: list[hdds_pb2.RevokedCertificateProto]) -> None:
        for listener in self._listeners:
            try:
                listener(records)
            except Exception:  # a broken listener must not stop apply
                log.exception("revocation listener failed")

    @property
    def index(self) -> CertificateIndex:
        if self._index is None:
            index = CertificateIndex()
            for scm_cert in (False, True):
                for proto in self.list_certificates(scm_certs=scm_cert):
                    index.add(proto)
            self._index = index
        return self._index

    def certificate_for_key(self, public_key_sha256: str) -> hdds_pb2.CertificateProto | None:
        return self.index.by_key.get(public_key_sha256.lower())

    def serials_of(self, node_type: str, owner_id: str) -> list[str]:
        return list(self.index.by_owner.get((node_type, owner_id), ()))

    def not_after_ms(self, serial_id: str) -> int | None:
        return self.index.not_after_ms.get(serial_id)

    def get_certificate(self, serial_id: str) -> hdds_pb2.CertificateProto | None:
        return self._store.valid_certs.get(serial_id) or self._store.valid_scm_certs.get(serial_id)

    def is_scm_certificate(self, serial_id: str) -> bool:
        return self._store.valid_scm_certs.get(serial_id) is not None

    def list_certificates(self, scm_certs: bool = False) -> list[hdds_pb2.CertificateProto]:
        table = self._store.valid_scm_certs if scm_certs else self._store.valid_certs
        return [v for _, v in table.items()]

    def is_revoked(self, serial_id: str, now_ms: int | None = None) -> bool:
        """True if revoked. A certificate superseded by a renewal is revoked from its record's
        ``revocationTimeMs`` on (the renewal overlap): callers that know the time (the per-call check)
        pass ``now_ms``; without it a superseded certificate counts as revoked already."""
        record = self._revoked.get(serial_id)
        if record is None:
            return False
        pending = now_ms is not None and bool(record.supersededBy) and record.revocationTimeMs > now_ms
        return not pending

    def revocation(self, serial_id: str) -> hdds_pb2.RevokedCertificateProto | None:
        return self._revoked.get(serial_id)

    def revocations(self) -> list[hdds_pb2.RevokedCertificateProto]:
        return list(self._revoked.values())

    def revoked_serials(self) -> frozenset[str]:
        return frozenset(self._revoked)

    @replicate(RequestType.CERT_STORE)
    def revoke_certificates(self, records: list[hdds_pb2.RevokedCertificateProto]) -> list[str]:
        """Record revocations (idempotent: an already revoked serial keeps its first record, except that
        a revocation replaces a renewal's supersession, which may not be in effect yet).
        Returns the serials that were newly revoked. Serials must be canonical (decimal, no leading
        zero, ASCII): the per-call check looks them up in that form."""
        fresh: list[hdds_pb2.RevokedCertificateProto] = []
        canonical: list[hdds_pb2.RevokedCertificateProto] = []
        for record in records:
            serial = record.serialId if serial_ids.is_canonical(record.serialId) else None
            if serial is None and record.serialId.isdigit():
                # a log entry written before serials were canonical (``0123``, non-ASCII digits): the
                # serial it names, as the table's older records are read (reinitialize)
                serial = serial_ids.legacy_serial(record.serialId)
            if serial is None:
                raise SCMException(
                    ResultCodes.INVALID_REQUEST,
                    f"bad serial id {record.serialId!r} in revocation: serials are stored in decimal ASCII digits "
                    "without leading zeros",
                )
            if serial != record.serialId:
                copy = hdds_pb2.RevokedCertificateProto()
                copy.CopyFrom(record)
                copy.serialId = serial
                record = copy
            canonical.append(record)
        for record in canonical:
            existing = self._revoked.get(record.serialId)
            # a definitive revocation (an administrator's) replaces a renewal's pending supersession
            if existing is not None and not (existing.supersededBy and not record.supersededBy):
                continue
            self._revoked[record.serialId] = record
            self._buffer.add_to_buffer(self._store.revoked_certs, record.serialId, record)
            fresh.append(record)
        if fresh:
            self._notify(fresh)
        return [r.serialId for r in fresh]

    @replicate(RequestType.CERT_STORE)
    def remove_all_expired_certificates(self, now_ms: int) -> list[str]:
        """Ozone's ``removeAllExpiredCertificates``, with the time chosen on the leader (an applied body reads no
        clock): every datanode, OM and client certificate of ``validCerts`` whose notAfter is before ``now_ms`` is
        removed; SCM certificates (``validSCMCerts``) stay. Returns the removed certificates (PEM), as Ozone does."""
        removed: list[str] = []
        for serial, proto in list(self._store.valid_certs.items()):
            try:
                not_after = pki.load_certificate(proto.x509Certificate).not_valid_after_utc
            except pki.PKIError:
                continue
            if int(not_after.timestamp() * 1000) < now_ms:
                self._buffer.remove_from_buffer(self._store.valid_certs, serial)
                removed.append(proto.x509Certificate)
        if removed:
            self._index = None  # rebuilt from the tables on next use
        return removed

    @replicate(RequestType.CERT_STORE)
    def store_valid_certificate(self, certificate: hdds_pb2.CertificateProto, scm_cert: bool) -> None:
        table = self._store.valid_scm_certs if scm_cert else self._store.valid_certs
        existing = table.get(certificate.serialId)
        if existing is not None and existing != certificate:
            raise SCMException(
                ResultCodes.INVALID_REQUEST, f"a different certificate with serial {certificate.serialId} is stored"
            )
        self._buffer.add_to_buffer(table, certificate.serialId, certificate)
        if self._index is not None:
            self._index.add(certificate)
