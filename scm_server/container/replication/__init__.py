"""ReplicationManager: health classification (pure), pending ops, commands and the report."""
