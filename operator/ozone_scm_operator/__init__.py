"""ozone-scm-operator: the Kubernetes operator for ``OzoneSCMCluster`` resources (kopf).

Layers, outermost first (checked by ``lint-imports``, see ``.importlinter``):

* ``main`` / ``handlers``: the console script and the thin kopf handlers; they only wire things up.
* ``reconciler``: one reconcile pass = observe, plan, write the intent into status, act.
* ``effects``: the only modules that do I/O: the Kubernetes API (``effects.kube``) and the SCMs, reached only
  through ``scm_server.client`` (``effects.scm``); the health and metrics server (``effects.web``).
* the pure core: ``spec`` (the resource's spec, defaults and validation), ``naming``, ``builders`` (spec ->
  Kubernetes object bodies), ``certs`` (CA mode ``operator``: root CA and sub-CA issuance), ``model`` (observed
  state and status as values), ``planner`` (observed state + spec + status -> the next single action) and
  ``status`` (conditions and phase). No I/O, no clock (``now`` is passed in), no randomness (keys are passed in).
"""

API_GROUP = "ozone-scm.io"
API_VERSION = "v1alpha1"
KIND = "OzoneSCMCluster"
PLURAL = "ozonescmclusters"
BACKUP_KIND = "OzoneSCMBackup"
BACKUP_PLURAL = "ozonescmbackups"
