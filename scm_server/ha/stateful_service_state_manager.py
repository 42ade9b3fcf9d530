"""Replicated state of SCM's smaller replicated services (Ozone's StatefulServiceStateManager,
FinalizationStateManager and the CertificateStore's DB side).

* ``StatefulServiceStateManager`` (RequestType.STATEFUL_SERVICE_CONFIG): persisted configuration
  of a stateful service, e.g. ContainerBalancer, as serialized proto bytes in
  ``statefulServiceConfig``.
* ``FinalizationStateManager`` (RequestType.FINALIZE): the ``#FINALIZING`` mark and the finalized
  ``#LAYOUTVERSION`` in the ``meta`` table (upgrade finalization).
* ``CertificateStore`` (RequestType.CERT_STORE): issued certificates in ``validCerts`` (OM/DN) and
  ``validSCMCerts`` (SCM root / sub-CA). Serial ids come from the ``CertificateId`` sequence.

All mutations follow the ``@replicate`` rules (deterministic, idempotent, proto/scalar args).
"""

from __future__ import annotations

from scm_server.exceptions import ResultCodes, SCMException
from scm_server.ha.replicate import RequestType, replicate
from scm_server.ha.scm_ha_manager_api import SCMHAManager
from scm_server.ha.transaction_buffer import SCMHADBTransactionBuffer
from scm_server.metadata import SCMMetadataStore
from scm_server.metadata.scm_db_definition import FINALIZING_KEY, LAYOUT_VERSION_KEY
from scm_server.proto import hdds_pb2


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

    def reinitialize(self) -> None:
        return None  # reads go to the tables directly

    def get_certificate(self, serial_id: str) -> hdds_pb2.CertificateProto | None:
        return self._store.valid_certs.get(serial_id) or self._store.valid_scm_certs.get(serial_id)

    def list_certificates(self, scm_certs: bool = False) -> list[hdds_pb2.CertificateProto]:
        table = self._store.valid_scm_certs if scm_certs else self._store.valid_certs
        return [v for _, v in table.items()]

    @replicate(RequestType.CERT_STORE)
    def store_valid_certificate(self, certificate: hdds_pb2.CertificateProto, scm_cert: bool) -> None:
        table = self._store.valid_scm_certs if scm_cert else self._store.valid_certs
        existing = table.get(certificate.serialId)
        if existing is not None and existing != certificate:
            raise SCMException(
                ResultCodes.INVALID_REQUEST, f"a different certificate with serial {certificate.serialId} is stored"
            )
        self._buffer.add_to_buffer(table, certificate.serialId, certificate)
