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

from scm_server.exceptions import ResultCodes, SCMException
from scm_server.ha.replicate import RequestType, replicate
from scm_server.ha.scm_ha_manager_api import SCMHAManager
from scm_server.ha.transaction_buffer import SCMHADBTransactionBuffer
from scm_server.metadata import SCMMetadataStore
from scm_server.metadata.scm_db_definition import FINALIZING_KEY, LAYOUT_VERSION_KEY
from scm_server.proto import hdds_pb2

log = logging.getLogger(__name__)


class StatefulServiceStateManager:
    def __init__(
        self, store: SCMMetadataStore, buffer: SCMHADBTransactionBuffer, ha_manager: SCMHAManager | None
    ) -> None:
        self._store = store
        self._buffer = buffer
        self.ha_manager = ha_manager
        self._configs: dict[str, bytes] = {}
        self.reinitialize()

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


class FinalizationStateManager:
    def __init__(
        self,
        store: SCMMetadataStore,
        buffer: SCMHADBTransactionBuffer,
        ha_manager: SCMHAManager | None,
        software_layout_version: int = 1,
    ) -> None:
        self._store = store
        self._buffer = buffer
        self.ha_manager = ha_manager
        self.software_layout_version = software_layout_version
        self.reinitialize()

    def reinitialize(self) -> None:
        self._finalizing = self._store.meta.get(FINALIZING_KEY) is not None
        stored = self._store.meta.get(LAYOUT_VERSION_KEY)
        self._layout_version = int(stored) if stored is not None else self.software_layout_version

    @property
    def metadata_layout_version(self) -> int:
        return self._layout_version

    def is_finalizing(self) -> bool:
        return self._finalizing

    @replicate(RequestType.FINALIZE)
    def add_finalizing_mark(self) -> None:
        self._finalizing = True
        self._buffer.add_to_buffer(self._store.meta, FINALIZING_KEY, "")

    @replicate(RequestType.FINALIZE)
    def remove_finalizing_mark(self) -> None:
        self._finalizing = False
        self._buffer.remove_from_buffer(self._store.meta, FINALIZING_KEY)

    @replicate(RequestType.FINALIZE)
    def finalize_layout_feature(self, layout_version: int) -> None:
        if layout_version > self.software_layout_version:
            raise SCMException(
                ResultCodes.INVALID_REQUEST,
                f"cannot finalize layout version {layout_version}: this SCM software supports "
                f"up to {self.software_layout_version}",
            )
        if layout_version <= self._layout_version:
            return  # idempotent
        self._layout_version = layout_version
        self._buffer.add_to_buffer(self._store.meta, LAYOUT_VERSION_KEY, str(layout_version))


class CertificateStore:
    def __init__(
        self, store: SCMMetadataStore, buffer: SCMHADBTransactionBuffer, ha_manager: SCMHAManager | None
    ) -> None:
        self._store = store
        self._buffer = buffer
        self.ha_manager = ha_manager
        self._revoked: dict[str, hdds_pb2.RevokedCertificateProto] = {}
        self._listeners: list[Callable[[list[hdds_pb2.RevokedCertificateProto]], None]] = []
        self.reinitialize()

    def reinitialize(self) -> None:
        """Reload the in-memory revocation set (certificates are read from the tables directly)."""
        self._revoked = dict(self._store.revoked_certs.items())
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

    def get_certificate(self, serial_id: str) -> hdds_pb2.CertificateProto | None:
        return self._store.valid_certs.get(serial_id) or self._store.valid_scm_certs.get(serial_id)

    def is_scm_certificate(self, serial_id: str) -> bool:
        return self._store.valid_scm_certs.get(serial_id) is not None

    def list_certificates(self, scm_certs: bool = False) -> list[hdds_pb2.CertificateProto]:
        table = self._store.valid_scm_certs if scm_certs else self._store.valid_certs
        return [v for _, v in table.items()]

    def is_revoked(self, serial_id: str) -> bool:
        return serial_id in self._revoked

    def revocation(self, serial_id: str) -> hdds_pb2.RevokedCertificateProto | None:
        return self._revoked.get(serial_id)

    def revocations(self) -> list[hdds_pb2.RevokedCertificateProto]:
        return list(self._revoked.values())

    def revoked_serials(self) -> frozenset[str]:
        return frozenset(self._revoked)

    @replicate(RequestType.CERT_STORE)
    def revoke_certificates(self, records: list[hdds_pb2.RevokedCertificateProto]) -> list[str]:
        """Record revocations (idempotent: an already revoked serial keeps its first record).
        Returns the serials that were newly revoked."""
        fresh: list[hdds_pb2.RevokedCertificateProto] = []
        for record in records:
            if not record.serialId or not record.serialId.isdigit():
                raise SCMException(ResultCodes.INVALID_REQUEST, f"bad serial id {record.serialId!r} in revocation")
            if record.serialId in self._revoked:
                continue
            self._revoked[record.serialId] = record
            self._buffer.add_to_buffer(self._store.revoked_certs, record.serialId, record)
            fresh.append(record)
        if fresh:
            self._notify(fresh)
        return [r.serialId for r in fresh]

    @replicate(RequestType.CERT_STORE)
    def store_valid_certificate(self, certificate: hdds_pb2.CertificateProto, scm_cert: bool) -> None:
        table = self._store.valid_scm_certs if scm_cert else self._store.valid_certs
        existing = table.get(certificate.serialId)
        if existing is not None and existing != certificate:
            raise SCMException(
                ResultCodes.INVALID_REQUEST, f"a different certificate with serial {certificate.serialId} is stored"
            )
        self._buffer.add_to_buffer(table, certificate.serialId, certificate)
