"""The pure part of playing the kubelet: what a Pod spec means, computed without running anything.

Called by ``kubelet.py`` (and unit-tested in ``test_podspec.py``). Deterministic functions of their inputs: the Pod,
the ConfigMaps/Secrets/Services/Pods it refers to, the image's defaults, ``now``. No I/O, no clock, no processes.
It must not import the kubelet, the emulator or anything of ``scm_server``.

- ``container_command``: the argv the kubelet runs: ``command`` replaces the image entrypoint, ``args`` the image
  cmd, and ``$(VAR)`` references expand from the container's environment (``$$`` escapes), as Kubernetes does;
- ``container_env``: the environment, in order: image defaults, ``envFrom`` (ConfigMaps/Secrets, with prefix),
  ``env`` with ``valueFrom`` (``fieldRef`` for metadata.name/namespace/uid/labels/annotations, status.podIP,
  status.podIPs, status.hostIP, spec.nodeName, spec.serviceAccountName; ``secretKeyRef``; ``configMapKeyRef``;
  ``resourceFieldRef``), honouring ``optional``; a missing reference is a ``ConfigError`` (the kubelet reports
  ``CreateContainerConfigError``);
- ``volume_files``: the files a ConfigMap, Secret, downward API or projected volume renders (``items``, paths,
  modes);
- ``dns_entries``/``dns_zone``: the cluster names a Pod resolves through cluster DNS (headless-service pod records
  ``<hostname>.<subdomain>.<ns>.svc.cluster.local`` for pods the service selects and that are ready or published
  while not ready, service names to their endpoints, ``<a-b-c-d>.<ns>.pod.cluster.local``); ``hosts_file``: the
  Pod's own ``/etc/hosts`` (localhost and its own names, as the kubelet writes it);
- ``pod_phase`` and ``pod_conditions``: the status a set of container states adds up to.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

Obj = dict[str, Any]
CLUSTER_DOMAIN = "cluster.local"


class ConfigError(Exception):
    """A container cannot be configured (missing ConfigMap/Secret/key): ``CreateContainerConfigError``."""


@dataclass(frozen=True)
class ImageSpec:
    """What an image would provide: entrypoint, default cmd, environment, working directory and user."""

    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    workdir: str | None = None


_VAR_REF = re.compile(r"\$\$|\$\(([-._a-zA-Z][-._a-zA-Z0-9]*)\)")


def expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes' ``$(VAR)`` expansion: known variables are replaced, unknown references stay as written and
    ``$$`` is an escaped ``$``."""

    def repl(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        name = m.group(1)
        return env[name] if name in env else m.group(0)

    return _VAR_REF.sub(repl, text)


def container_command(container: Mapping[str, Any], image: ImageSpec, env: Mapping[str, str]) -> list[str]:
    command = container.get("command")
    args = container.get("args")
    if command:
        argv = list(command) + list(args or [])
    else:
        argv = list(image.entrypoint) + (list(args) if args is not None else list(image.cmd))
    if not argv:
        raise ConfigError("no command specified")
    return [expand(str(a), env) for a in argv]


def _decoded(secret: Mapping[str, Any], key: str) -> str | None:
    data = secret.get("data") or {}
    if key in data:
        return base64.b64decode(data[key]).decode("utf-8", errors="replace")
    string_data = secret.get("stringData") or {}
    return string_data.get(key)


def field_ref(pod: Mapping[str, Any], path: str) -> str:
    meta = pod.get("metadata") or {}
    status = pod.get("status") or {}
    spec = pod.get("spec") or {}
    m = re.fullmatch(r"metadata\.(labels|annotations)\['([^']+)'\]", path)
    if m:
        return str((meta.get(m.group(1)) or {}).get(m.group(2), ""))
    simple = {
        "metadata.name": meta.get("name"), "metadata.namespace": meta.get("namespace"),
        "metadata.uid": meta.get("uid"), "status.podIP": status.get("podIP"),
        "status.hostIP": status.get("hostIP"), "spec.nodeName": spec.get("nodeName"),
        "spec.serviceAccountName": spec.get("serviceAccountName", "default"),
        "status.podIPs": ",".join(p.get("ip", "") for p in status.get("podIPs") or []),
        "status.hostIPs": ",".join(p.get("ip", "") for p in status.get("hostIPs") or []),
    }
    if path in simple:
        return "" if simple[path] is None else str(simple[path])
    if path in ("metadata.labels", "metadata.annotations"):
        items = meta.get(path.split(".")[1]) or {}
        return "\n".join(f'{k}="{v}"' for k, v in sorted(items.items()))
    raise ConfigError(f"unsupported fieldRef {path!r}")


def _resource_ref(container: Mapping[str, Any], ref: Mapping[str, Any]) -> str:
    resource = ref.get("resource", "")
    kind, _, name = resource.partition(".")
    value = ((container.get("resources") or {}).get(kind) or {}).get(name)
    if value is None:
        return "0" if name == "ephemeral-storage" else ("1" if name == "cpu" else "0")
    return str(value)


def container_env(pod: Mapping[str, Any], container: Mapping[str, Any], image: ImageSpec,
                  configmaps: Mapping[str, Mapping[str, Any]], secrets: Mapping[str, Mapping[str, Any]],
                  extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The container's environment (see module docstring). ``configmaps``/``secrets`` are keyed by name, in the
    Pod's namespace; ``extra`` are the kubelet's own variables (``HOSTNAME``, service links), overridden by the
    spec."""
    env: dict[str, str] = dict(image.env)
    env.update(extra or {})
    for source in container.get("envFrom") or []:
        prefix = source.get("prefix", "")
        if "configMapRef" in source:
            ref = source["configMapRef"]
            cm = configmaps.get(ref["name"])
            if cm is None:
                if ref.get("optional"):
                    continue
                raise ConfigError(f'configmap "{ref["name"]}" not found')
            for k, v in (cm.get("data") or {}).items():
                env[prefix + k] = str(v)
        elif "secretRef" in source:
            ref = source["secretRef"]
            secret = secrets.get(ref["name"])
            if secret is None:
                if ref.get("optional"):
                    continue
                raise ConfigError(f'secret "{ref["name"]}" not found')
            for k in secret.get("data") or {}:
                env[prefix + k] = _decoded(secret, k) or ""
    for var in container.get("env") or []:
        name = var["name"]
        if "value" in var or "valueFrom" not in var:
            env[name] = expand(str(var.get("value", "")), env)
            continue
        src = var["valueFrom"]
        if "fieldRef" in src:
            env[name] = field_ref(pod, src["fieldRef"]["fieldPath"])
        elif "resourceFieldRef" in src:
            env[name] = _resource_ref(container, src["resourceFieldRef"])
        elif "configMapKeyRef" in src:
            ref = src["configMapKeyRef"]
            cm = configmaps.get(ref["name"])
            value = None if cm is None else (cm.get("data") or {}).get(ref["key"])
            if value is None:
                if ref.get("optional"):
                    continue
                what = f'configmap "{ref["name"]}" not found' if cm is None else \
                    f'couldn\'t find key {ref["key"]} in ConfigMap {pod["metadata"].get("namespace")}/{ref["name"]}'
                raise ConfigError(what)
            env[name] = str(value)
        elif "secretKeyRef" in src:
            ref = src["secretKeyRef"]
            secret = secrets.get(ref["name"])
            value = None if secret is None else _decoded(secret, ref["key"])
            if value is None:
                if ref.get("optional"):
                    continue
                what = f'secret "{ref["name"]}" not found' if secret is None else \
                    f'couldn\'t find key {ref["key"]} in Secret {pod["metadata"].get("namespace")}/{ref["name"]}'
                raise ConfigError(what)
            env[name] = value
        else:
            raise ConfigError(f"unsupported valueFrom for {name}")
    return env


# ---------------------------------------------------------------------------------------------------------------------
# Volumes rendered from API objects


@dataclass(frozen=True)
class RenderedFile:
    path: str
    content: bytes
    mode: int


def _items(data: Mapping[str, bytes], items: Sequence[Mapping[str, Any]] | None, default_mode: int,
           what: str, optional: bool) -> list[RenderedFile]:
    if items:
        out = []
        for item in items:
            if item["key"] not in data:
                if optional:
                    continue
                raise ConfigError(f"configmap/secret key {item['key']!r} not found in {what}")
            out.append(RenderedFile(item["path"], data[item["key"]], int(item.get("mode", default_mode))))
        return out
    return [RenderedFile(k, v, default_mode) for k, v in sorted(data.items())]


def _cm_data(cm: Mapping[str, Any]) -> dict[str, bytes]:
    data = {k: str(v).encode() for k, v in (cm.get("data") or {}).items()}
    data.update({k: base64.b64decode(v) for k, v in (cm.get("binaryData") or {}).items()})
    return data


def _secret_data(secret: Mapping[str, Any]) -> dict[str, bytes]:
    return {k: base64.b64decode(v) for k, v in (secret.get("data") or {}).items()}


def _downward(pod: Mapping[str, Any], items: Sequence[Mapping[str, Any]], default_mode: int) -> list[RenderedFile]:
    out = []
    for item in items:
        if "fieldRef" in item:
            value = field_ref(pod, item["fieldRef"]["fieldPath"])
        else:
            raise ConfigError("downward API resourceFieldRef items are not supported by the local kubelet")
        out.append(RenderedFile(item["path"], value.encode(), int(item.get("mode", default_mode))))
    return out


def volume_files(pod: Mapping[str, Any], volume: Mapping[str, Any], configmaps: Mapping[str, Mapping[str, Any]],
                 secrets: Mapping[str, Mapping[str, Any]],
                 service_account_token: str | None = None) -> list[RenderedFile] | None:
    """The files of a ConfigMap/Secret/downwardAPI/projected volume, or None for other volume types.
    ``service_account_token``: what a projected ``serviceAccountToken`` source renders (the kubelet fixture gets it
    from a real API server's TokenRequest API; without one such a source is a configuration error)."""
    if "configMap" in volume:
        src = volume["configMap"]
        cm = configmaps.get(src["name"])
        if cm is None:
            if src.get("optional"):
                return []
            raise ConfigError(f'configmap "{src["name"]}" not found')
        return _items(_cm_data(cm), src.get("items"), int(src.get("defaultMode", 0o644)), src["name"],
                      bool(src.get("optional")))
    if "secret" in volume:
        src = volume["secret"]
        secret = secrets.get(src["secretName"])
        if secret is None:
            if src.get("optional"):
                return []
            raise ConfigError(f'secret "{src["secretName"]}" not found')
        return _items(_secret_data(secret), src.get("items"), int(src.get("defaultMode", 0o644)),
                      src["secretName"], bool(src.get("optional")))
    if "downwardAPI" in volume:
        src = volume["downwardAPI"]
        return _downward(pod, src.get("items") or [], int(src.get("defaultMode", 0o644)))
    if "projected" in volume:
        src = volume["projected"]
        mode = int(src.get("defaultMode", 0o644))
        files: list[RenderedFile] = []
        for source in src.get("sources") or []:
            if "configMap" in source:
                files += volume_files(pod, {"configMap": {**source["configMap"], "defaultMode": mode}},
                                      configmaps, secrets) or []
            elif "serviceAccountToken" in source and service_account_token is not None:
                files.append(RenderedFile(source["serviceAccountToken"]["path"], service_account_token.encode(), mode))
            elif "secret" in source:
                files += volume_files(pod, {"secret": {"secretName": source["secret"]["name"],
                                                       **{k: v for k, v in source["secret"].items() if k != "name"},
                                                       "defaultMode": mode}}, configmaps, secrets) or []
            elif "downwardAPI" in source:
                files += _downward(pod, source["downwardAPI"].get("items") or [], mode)
            else:
                raise ConfigError(f"projected source {sorted(source)} is not supported by the local kubelet")
        return files
    return None


def referenced_objects(pod: Mapping[str, Any]) -> tuple[set[str], set[str]]:
    """Names of the ConfigMaps and Secrets a Pod reads (env and volumes)."""
    cms: set[str] = set()
    secrets: set[str] = set()
    spec = pod.get("spec") or {}
    for c in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
        for source in c.get("envFrom") or []:
            if "configMapRef" in source:
                cms.add(source["configMapRef"]["name"])
            if "secretRef" in source:
                secrets.add(source["secretRef"]["name"])
        for var in c.get("env") or []:
            src = var.get("valueFrom") or {}
            if "configMapKeyRef" in src:
                cms.add(src["configMapKeyRef"]["name"])
            if "secretKeyRef" in src:
                secrets.add(src["secretKeyRef"]["name"])
    for vol in spec.get("volumes") or []:
        if "configMap" in vol:
            cms.add(vol["configMap"]["name"])
        if "secret" in vol:
            secrets.add(vol["secret"]["secretName"])
        for source in (vol.get("projected") or {}).get("sources") or []:
            if "configMap" in source:
                cms.add(source["configMap"]["name"])
            if "secret" in source:
                secrets.add(source["secret"]["name"])
    return cms, secrets


# ---------------------------------------------------------------------------------------------------------------------
# Cluster DNS as /etc/hosts


def _selects(service: Mapping[str, Any], pod: Mapping[str, Any]) -> bool:
    selector = (service.get("spec") or {}).get("selector") or {}
    labels = (pod.get("metadata") or {}).get("labels") or {}
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def _ready(pod: Mapping[str, Any]) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


def dns_entries(pods: Iterable[Mapping[str, Any]], services: Iterable[Mapping[str, Any]]) -> list[
        tuple[str, str, str]]:
    """(ip, name, namespace) records of the cluster zone: service names to their endpoints, and the
    ``<hostname>.<subdomain>`` records of pods behind a headless service."""
    pods = [p for p in pods if (p.get("status") or {}).get("podIP") and not p["metadata"].get("deletionTimestamp")]
    records: list[tuple[str, str, str]] = []
    for svc in services:
        ns = svc["metadata"].get("namespace", "default")
        name = svc["metadata"]["name"]
        spec = svc.get("spec") or {}
        publish = bool(spec.get("publishNotReadyAddresses"))
        headless = spec.get("clusterIP") == "None"
        endpoints = [p for p in pods if p["metadata"].get("namespace") == ns and _selects(svc, p)
                     and (publish or _ready(p))]
        for p in sorted(endpoints, key=lambda p: p["metadata"]["name"]):
            ip = p["status"]["podIP"]
            records.append((ip, f"{name}.{ns}.svc.{CLUSTER_DOMAIN}", ns))
            if headless:
                hostname = (p.get("spec") or {}).get("hostname")
                subdomain = (p.get("spec") or {}).get("subdomain")
                if hostname and subdomain == name:
                    records.append((ip, f"{hostname}.{name}.{ns}.svc.{CLUSTER_DOMAIN}", ns))
    return records


def dns_zone(pods: Iterable[Mapping[str, Any]], services: Iterable[Mapping[str, Any]]) -> dict[str, list[str]]:
    """The cluster zone the fixture's DNS server answers from: name -> addresses (``dns_entries`` plus the
    ``<a-b-c-d>.<ns>.pod.cluster.local`` names)."""
    pods = list(pods)
    zone: dict[str, list[str]] = {}
    for ip, fqdn, _ns in dns_entries(pods, services):
        if ip not in zone.setdefault(fqdn, []):
            zone[fqdn].append(ip)
    for p in pods:
        pod_ip = str((p.get("status") or {}).get("podIP") or "")
        if pod_ip:
            namespace = p["metadata"].get("namespace", "default")
            zone[f"{pod_ip.replace('.', '-')}.{namespace}.pod.{CLUSTER_DOMAIN}"] = [pod_ip]
    return zone


def hosts_file(pod: Mapping[str, Any]) -> str:
    """The ``/etc/hosts`` the kubelet writes for a Pod: localhost and the Pod's own names (cluster names come from
    DNS, see ``clusterdns.py``)."""
    ns = pod["metadata"].get("namespace", "default")
    spec = pod.get("spec") or {}
    ip = (pod.get("status") or {}).get("podIP", "")
    hostname = spec.get("hostname") or pod["metadata"]["name"]
    lines = ["# Kubernetes-managed hosts file (local kubelet fixture).", "127.0.0.1\tlocalhost",
             "::1\tlocalhost ip6-localhost ip6-loopback"]
    own = [hostname]
    if spec.get("subdomain"):
        own.insert(0, f"{hostname}.{spec['subdomain']}.{ns}.svc.{CLUSTER_DOMAIN}")
    if ip:
        lines.append(f"{ip}\t{' '.join(own)}")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------------------------------
# Status


def pod_phase(restart_policy: str, init_done: bool, init_failed: bool, states: Sequence[Mapping[str, Any]],
              will_restart: Sequence[bool], started_once: Sequence[bool]) -> str:
    """Kubernetes' Pod phase from the main containers' states (``{"running":..}``, ``{"waiting":..}``,
    ``{"terminated": {"exitCode": n}}``), whether the kubelet will restart each, and whether each ever started."""
    if init_failed and restart_policy == "Never":
        return "Failed"
    if not init_done or not states or not all(started_once):
        return "Pending"
    if any("running" in s for s in states) or any(will_restart):
        return "Running"
    codes = [int(s["terminated"].get("exitCode", 0)) for s in states if "terminated" in s]
    if len(codes) == len(states):
        return "Succeeded" if all(c == 0 for c in codes) else "Failed"
    return "Pending"
