"""Ways into this SCM from an existing Ozone cluster (``ozone-scm migrate from-ozone``).

* :mod:`scm_server.migrate.ozone_records` -- pure: the bytes of Ozone's ``scm.db`` (its SCMDBDefinition, its
  codecs), its VERSION file and its Ratis log segments -> our records and a :class:`MigrationPlan`;
* :mod:`scm_server.migrate.from_ozone` -- the edge: opens Ozone's RocksDB read-only, checks that no Ozone SCM
  holds it and that its Ratis log holds nothing scm.db lacks, and writes this SCM's store.
"""
