"""``scm_audit``: the PySpark replication audit of SCM exports (docs/audit.md).

Layout (only ``transforms``, ``schema`` and ``job`` import pyspark; the rest is plain Python so the
``ozone-scm audit run`` launcher can validate input and check Java before a JVM starts):

* ``inputs``: find and validate export directories (manifests, files, one cluster);
* ``vocabulary``: Ozone's health-state names and their order;
* ``schema``: Spark schemas of the export format (from ``scm_server.audit_format``);
* ``transforms``: pure DataFrame -> DataFrame functions (classification, findings, cross-SCM,
  agreement with SCM's ReplicationManager);
* ``report``: summary JSON and the self-contained HTML page (jinja2, inline SVG charts);
* ``output``: the output directory (runs, trends, atomic publish);
* ``job``: the thin entry point ``spark-submit`` runs; ``submit``: the launcher behind the CLI.

It shares exactly one module with the SCM, the export format (``scm_server.audit_format``); an
import-linter contract forbids everything else of ``scm_server``.
"""

__version__ = "0.1.0"
