"""Local SCM state on disk: scm.db tables (SCMDBDefinition over plyvel) and the VERSION file.

Nothing outside this package builds raw LevelDB keys; managers use typed tables and write
batches (through the HA transaction buffer for replicated state).
"""

from scm_server.metadata.scm_db_definition import (
    TRANSACTION_INFO_KEY,
    BatchOperation,
    ColumnFamily,
    SCMDBDefinition,
    Table,
)
from scm_server.metadata.scm_metadata_store import SCMMetadataStore
from scm_server.metadata.storage_config import (
    SCMStorageConfig,
    StorageState,
    new_cluster_id,
    validate_cluster_id,
)

__all__ = [
    "TRANSACTION_INFO_KEY",
    "BatchOperation",
    "ColumnFamily",
    "SCMDBDefinition",
    "SCMMetadataStore",
    "SCMStorageConfig",
    "StorageState",
    "Table",
    "new_cluster_id",
    "validate_cluster_id",
]
