"""Choose the SCMHAManager an SCM runs with: Raft-replicated (``SCMHAManagerImpl``) or the stub.

The daemon (and tests) call :func:`build_ha_manager` after the storage is initialised (VERSION
exists) and hand the result to ``StorageContainerManager.create(conf, ha_manager=...)``. The choice:

* ``SCMHAManagerImpl`` (Raft, :mod:`scm_server.ha.scm_ha_manager`) when the VERSION file says
  ``scmHA=true`` (every SCM set up by ``scm --init``/``--bootstrap``) and ``ha`` is not False;
* ``SCMHAManagerStub`` (applies in-process, no Raft) otherwise: unit tests, ``ha=False``,
  and the ``OZONE_SCM_HA_STUB=1`` escape hatch for debugging a single SCM without Raft.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from scm_server.conf import OzoneConfiguration
from scm_server.metadata.storage_config import SCMStorageConfig

LOG = logging.getLogger(__name__)


def build_ha_manager(
    conf: OzoneConfiguration,
    storage_config: SCMStorageConfig,
    metadata_store: Any,
    *,
    ha: bool | None = None,
    **kwargs: Any,
) -> Any:
    """Return an object implementing ``SCMHAManager`` for this SCM.

    ``metadata_store`` is the opened SCMMetadataStore (scm.db) the transaction buffer writes to;
    extra keyword arguments are passed through to the chosen implementation (e.g. ``clock``).
    """
    use_raft = storage_config.scm_ha if ha is None else ha
    if os.environ.get("OZONE_SCM_HA_STUB") == "1":
        use_raft = False
    if use_raft:
        try:
            from scm_server.ha.scm_ha_manager import SCMHAManagerImpl
        except ImportError as exc:  # the Raft runtime is not available in this build
            LOG.warning("Raft HA manager unavailable (%s); running without replication", exc)
        else:
            return SCMHAManagerImpl(conf, storage_config, metadata_store, **kwargs)
    from scm_server.ha.scm_ha_manager_stub import SCMHAManagerStub

    return SCMHAManagerStub(metadata_store, **kwargs)
