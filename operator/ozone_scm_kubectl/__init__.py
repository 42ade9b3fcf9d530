"""``kubectl ozone-scm``: the kubectl plugin for ``OzoneSCMCluster`` resources (console script ``kubectl-ozone_scm``).

Layers, outermost first (checked by ``lint-imports``, see ``.importlinter``):

* ``main``: the click commands; parse, call ``kube`` (and ``scm`` for SCM's own answers), print with ``view``;
* ``kube``: the only module that talks to the API server (the official ``kubernetes`` client, honouring
  ``KUBECONFIG``, ``--kubeconfig``, ``--context`` and ``--namespace`` as kubectl does); ``scm``: SCM's admin API
  through ``scm_server.client`` (never ``kubectl exec``);
* ``view`` and ``bundle``: pure -- the status summary and its rich rendering, the bodies the plugin writes
  (annotations, an ``OzoneSCMBackup``), the support bundle's contents and their redaction.

The plugin never acts on the ring itself: it asks the operator through annotations on the resource
(``ozone_scm_operator.directives``) and reads back what the operator reports in status and Events.
"""
