"""The contract every replicated state manager of SCM shares (Ozone's ``*StateManagerImpl`` classes behind
``@Replicate``): containers, pipelines, deleted blocks, sequence IDs, stateful-service configurations,
finalization, certificates (the issued and revoked tables).

* Its durable state lives in tables of ``scm.db`` (``_store``). It changes them only while a Raft entry is
  applied, through the transaction ``_buffer``, which is flushed together with the applied index: after a
  restart exactly the entries after that index are applied again.
* Its mutations are methods decorated with :func:`scm_server.ha.replicate.replicate`: on the leader the call is
  proposed through ``ha_manager``; every SCM runs the undecorated body when the entry is applied.
* :meth:`reinitialize` rebuilds everything it holds in memory from the tables: at construction, and after a
  checkpoint install replaced the tables under it. A subclass sets up fields that survive a reload before
  calling ``super().__init__`` and (re)builds the others in ``reinitialize``.
"""

from __future__ import annotations

from scm_server.ha.scm_ha_manager_api import SCMHAManager
from scm_server.ha.transaction_buffer import SCMHADBTransactionBuffer
from scm_server.metadata import SCMMetadataStore


class ReplicatedStateManager:
    def __init__(
        self, store: SCMMetadataStore, buffer: SCMHADBTransactionBuffer, ha_manager: SCMHAManager | None
    ) -> None:
        self._store = store
        self._buffer = buffer
        self.ha_manager = ha_manager
        self.reinitialize()

    def reinitialize(self) -> None:
        """Rebuild the in-memory state from ``scm.db``'s tables."""
        raise NotImplementedError(
            f"{type(self).__name__} must rebuild its memory from scm.db in reinitialize()"
        )
