"""StatefulServiceStateManager, FinalizationStateManager and CertificateStore through the facade's stub HA."""

from __future__ import annotations

from pathlib import Path

import pytest
from scm_state_harness import make_conf, make_scm

from scm_server.exceptions import ResultCodes, SCMException
from scm_server.ha.sequence_id_generator import CERTIFICATE_ID
from scm_server.proto import hdds_pb2
from scm_server.scm import StorageContainerManager


async def test_replicated_service_state_survives_restart(tmp_path: Path) -> None:
    scm = await make_scm(tmp_path)
    await scm.stateful_service_state_manager.save_configuration("ContainerBalancer", b"\x08\x01")
    await scm.stateful_service_state_manager.save_configuration("Other", b"x")
    await scm.stateful_service_state_manager.delete_configuration("Other")
    with pytest.raises(SCMException) as err:
        await scm.stateful_service_state_manager.save_configuration("", b"")
    assert err.value.result is ResultCodes.INVALID_REQUEST
    fsm = scm.finalization_state_manager
    await fsm.add_finalizing_mark()
    assert fsm.is_finalizing()
    await fsm.finalize_layout_feature(10)  # already finalized (a new cluster starts at Ozone 2.2.0's 10)
    with pytest.raises(SCMException, match="supports up to 10"):
        await fsm.finalize_layout_feature(11)
    await fsm.remove_finalizing_mark()
    serial = str(await scm.sequence_id_generator.get_next_id(CERTIFICATE_ID))
    cert = hdds_pb2.CertificateProto(serialId=serial, x509Certificate="-----BEGIN CERTIFICATE-----", nodeType="OM")
    await scm.certificate_store.store_valid_certificate(cert, False)
    await scm.certificate_store.store_valid_certificate(cert, False)  # idempotent
    other = hdds_pb2.CertificateProto(serialId=serial, x509Certificate="different")
    with pytest.raises(SCMException):
        await scm.certificate_store.store_valid_certificate(other, False)
    await scm.stop()

    again = await StorageContainerManager.create(make_conf(tmp_path))
    assert again.stateful_service_state_manager.read_configuration("ContainerBalancer") == b"\x08\x01"
    assert again.stateful_service_state_manager.read_configuration("Other") is None
    assert not again.finalization_state_manager.is_finalizing()
    assert again.finalization_state_manager.metadata_layout_version == 10
    assert again.certificate_store.get_certificate(serial) == cert
    assert serial == "3"  # after the root (1) and sub-CA (2) serials
    await again.stop()
