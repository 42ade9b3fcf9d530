"""The API server, as the plugin uses it: the official ``kubernetes`` client, configured like kubectl.

Called by ``main``. The connection comes from the kubeconfig (``--kubeconfig``, else ``KUBECONFIG``, else
``~/.kube/config``), its ``--context`` (else the current one) and the namespace (``--namespace``, else the context's,
else ``default``). Bodies are plain dicts. Failures become :class:`PluginError` with one line saying what to do.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import kubernetes.client
import kubernetes.config
import urllib3
from kubernetes.client.exceptions import ApiException

from ozone_scm_operator import API_GROUP, API_VERSION, KIND, PLURAL
from ozone_scm_operator.naming import LABEL_CLUSTER

from .view import BACKUP_KIND, BACKUP_PLURAL

Body = dict[str, Any]


class PluginError(Exception):
    """A one-line message for the user (exit code 1)."""


class NotFoundError(PluginError):
    pass


def _message(exc: ApiException) -> str:
    try:
        return str(json.loads(exc.body or "{}").get("message") or exc.reason)
    except (ValueError, AttributeError):
        return str(exc.reason)


class Kube:
    def __init__(self, kubeconfig: str | None, context: str | None, namespace: str | None,
                 timeout: float = 30.0) -> None:
        cfg = kubernetes.client.Configuration()
        try:
            kubernetes.config.load_kube_config(config_file=kubeconfig, context=context, client_configuration=cfg)
            _, active = kubernetes.config.list_kube_config_contexts(config_file=kubeconfig)
            contexts, _ = kubernetes.config.list_kube_config_contexts(config_file=kubeconfig)
        except (kubernetes.config.ConfigException, OSError) as exc:
            where = kubeconfig or "KUBECONFIG / ~/.kube/config"
            raise PluginError(f"cannot load a kubeconfig from {where}: {exc}; pass --kubeconfig FILE or set KUBECONFIG") from None
        chosen = next((c for c in contexts if c.get("name") == context), None) if context else active
        ctx_ns = ((chosen or {}).get("context") or {}).get("namespace")
        self.namespace: str = namespace or ctx_ns or "default"
        self.server: str = cfg.host
        self.api = kubernetes.client.ApiClient(cfg)
        self.core = kubernetes.client.CoreV1Api(self.api)
        self.custom = kubernetes.client.CustomObjectsApi(self.api)
        self.timeout = timeout

    def close(self) -> None:
        self.api.close()

    def _call(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, _request_timeout=self.timeout, **kwargs)
        except ApiException as exc:
            if exc.status == 404:
                raise NotFoundError(f"{what}: not found ({_message(exc)})") from None
            raise PluginError(f"{what}: HTTP {exc.status}: {_message(exc)}") from None
        except urllib3.exceptions.HTTPError as exc:
            raise PluginError(f"{what}: cannot reach the API server at {self.server} ({exc.__class__.__name__}); "
                              "check --context / KUBECONFIG") from None

    def _json(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        resp = self._call(what, fn, *args, _preload_content=False, **kwargs)
        return json.loads(resp.data or b"null")

    # ---- OzoneSCMCluster ----
    def cluster(self, name: str) -> Body:
        try:
            body: Body = self._call(f"{KIND} {name}", self.custom.get_namespaced_custom_object, API_GROUP, API_VERSION,
                                    self.namespace, PLURAL, name)
        except NotFoundError:
            raise NotFoundError(f"{KIND} {name} not found in namespace {self.namespace} (kubectl get oscm -n "
                                f"{self.namespace} lists them; -n chooses another namespace)") from None
        return body

    def clusters(self) -> list[Body]:
        result = self._call(f"list {KIND}", self.custom.list_namespaced_custom_object, API_GROUP, API_VERSION,
                            self.namespace, PLURAL)
        return sorted(result.get("items") or [], key=lambda c: c["metadata"]["name"])

    def annotate(self, name: str, values: Mapping[str, str | None]) -> Body:
        body: Body = self._call(f"annotate {KIND} {name}", self.custom.patch_namespaced_custom_object, API_GROUP,
                                API_VERSION, self.namespace, PLURAL, name,
                                {"metadata": {"annotations": dict(values)}})
        return body

    # ---- what the operator made for a cluster ----
    def _selector(self, cluster: str) -> str:
        return f"{LABEL_CLUSTER}={cluster}"

    def _mine(self, items: list[Body], cluster: str) -> list[Body]:
        # filtered here too: not every server honours label selectors
        return sorted((i for i in items if ((i.get("metadata") or {}).get("labels") or {}).get(LABEL_CLUSTER) == cluster),
                      key=lambda i: i["metadata"]["name"])

    def pods(self, cluster: str) -> list[Body]:
        out = self._json("list Pods", self.core.list_namespaced_pod, self.namespace,
                         label_selector=self._selector(cluster))
        return self._mine(out.get("items") or [], cluster)

    def pvcs(self, cluster: str) -> list[Body]:
        out = self._json("list PersistentVolumeClaims", self.core.list_namespaced_persistent_volume_claim,
                         self.namespace, label_selector=self._selector(cluster))
        return self._mine(out.get("items") or [], cluster)

    def secrets(self, cluster: str) -> list[Body]:
        """The cluster's Secrets (the caller keeps only their metadata and key names)."""
        out = self._json("list Secrets", self.core.list_namespaced_secret, self.namespace,
                         label_selector=self._selector(cluster))
        return self._mine(out.get("items") or [], cluster)

    def events(self, involved: set[str]) -> list[Body]:
        out = self._json("list Events", self.core.list_namespaced_event, self.namespace)
        return [e for e in out.get("items") or [] if (e.get("involvedObject") or {}).get("name") in involved]

    def pod_log(self, pod: str, container: str, tail: int | None) -> str:
        kwargs: dict[str, Any] = {"container": container}
        if tail is not None:
            kwargs["tail_lines"] = tail
        resp = self._call(f"log of {pod}/{container}", self.core.read_namespaced_pod_log, pod, self.namespace,
                          _preload_content=False, **kwargs)
        data: bytes = resp.data or b""
        return data.decode(errors="replace")

    # ---- OzoneSCMBackup ----
    def backups(self) -> list[Body] | None:
        """Every ``OzoneSCMBackup`` in the namespace, or None when the kind is not installed."""
        try:
            result = self._call(f"list {BACKUP_KIND}", self.custom.list_namespaced_custom_object, API_GROUP,
                                API_VERSION, self.namespace, BACKUP_PLURAL)
        except NotFoundError:
            return None
        return list(result.get("items") or [])

    def create_backup(self, body: Body) -> Body:
        name = body["metadata"]["name"]
        try:
            created: Body = self._call(f"create {BACKUP_KIND} {name}", self.custom.create_namespaced_custom_object,
                                       API_GROUP, API_VERSION, self.namespace, BACKUP_PLURAL, body)
        except NotFoundError:
            raise PluginError(f"the {BACKUP_KIND} kind is not installed in this cluster; install the operator's "
                              "CRDs (helm upgrade of the ozone-scm-operator chart, or kubectl apply -f manifests/)"
                              ) from None
        except PluginError as exc:
            if "HTTP 409" in str(exc):
                raise PluginError(f"{BACKUP_KIND} {name} already exists in namespace {self.namespace}; choose "
                                  "another --name") from None
            raise
        return created

    def backup(self, name: str) -> Body:
        body: Body = self._call(f"{BACKUP_KIND} {name}", self.custom.get_namespaced_custom_object, API_GROUP,
                                API_VERSION, self.namespace, BACKUP_PLURAL, name)
        return body
