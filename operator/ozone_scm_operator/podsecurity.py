"""A pure checker of the Kubernetes Pod Security Standards (``baseline`` and ``restricted``, latest version), as
https://kubernetes.io/docs/concepts/security/pod-security-standards/ documents them.

Operator-independent (no import from the operator; stdlib only): the operator checks the Pods it is about to
create in a namespace labelled ``pod-security.kubernetes.io/enforce`` (so a user override that breaks the profile
is a Degraded condition, not a Pod the API server refuses), and the emulated API server of ``tests/e2e/local``
enforces it on Pods and on the Pod templates of Deployments, Jobs and CronJobs as Pod Security admission does.

:func:`check` takes a Pod spec (``pod["spec"]`` or a template's ``spec``) and a level and returns the violations,
each one line naming the field ("" for none). ``privileged`` allows everything.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

ENFORCE_LABEL = "pod-security.kubernetes.io/enforce"
LEVELS = ("privileged", "baseline", "restricted")

# baseline: capabilities a container may add
BASELINE_CAPABILITIES = frozenset({
    "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD", "NET_BIND_SERVICE", "SETFCAP",
    "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT",
})
SAFE_SYSCTLS = frozenset({
    "kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
})
SELINUX_TYPES = frozenset({"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"})
# restricted: the only volume types allowed
RESTRICTED_VOLUMES = frozenset({
    "configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret",
})
_VOLUME_SOURCE_KEYS = frozenset({"name"})


def _containers(spec: Mapping[str, Any]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    for key in ("initContainers", "containers", "ephemeralContainers"):
        for c in spec.get(key) or ():
            yield f"{key}[{c.get('name', '?')}]", c


def _sc(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("securityContext") or {}


def _baseline(spec: Mapping[str, Any]) -> list[str]:
    out: list[str] = []
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(key):
            out.append(f"spec.{key} must not be true")
    for v in spec.get("volumes") or ():
        if "hostPath" in v:
            out.append(f"volume {v.get('name')!r} must not be a hostPath")
    psc = _sc(spec)
    for s in psc.get("sysctls") or ():
        if s.get("name") not in SAFE_SYSCTLS:
            out.append(f"spec.securityContext.sysctls: {s.get('name')!r} is not a safe sysctl")
    pod_objs: list[tuple[str, Mapping[str, Any]]] = [("spec.securityContext", psc)]
    for where, c in _containers(spec):
        csc = _sc(c)
        pod_objs.append((f"{where}.securityContext", csc))
        if csc.get("privileged"):
            out.append(f"{where}.securityContext.privileged must not be true")
        added = (csc.get("capabilities") or {}).get("add") or ()
        bad = [cap for cap in added if cap not in BASELINE_CAPABILITIES]
        if bad:
            out.append(f"{where}.securityContext.capabilities.add must not add {', '.join(bad)}")
        if csc.get("procMount") not in (None, "Default"):
            out.append(f"{where}.securityContext.procMount must be Default")
        for port in c.get("ports") or ():
            if port.get("hostPort"):
                out.append(f"{where}.ports: hostPort {port['hostPort']} is not allowed")
    for where, sc in pod_objs:
        se = sc.get("seLinuxOptions") or {}
        if se.get("type", "") not in SELINUX_TYPES:
            out.append(f"{where}.seLinuxOptions.type {se.get('type')!r} is not allowed")
        if se.get("user") or se.get("role"):
            out.append(f"{where}.seLinuxOptions must not set user or role")
        seccomp = (sc.get("seccompProfile") or {}).get("type")
        if seccomp == "Unconfined":
            out.append(f"{where}.seccompProfile.type must not be Unconfined")
        if (sc.get("windowsOptions") or {}).get("hostProcess"):
            out.append(f"{where}.windowsOptions.hostProcess must not be true")
        if (sc.get("appArmorProfile") or {}).get("type") not in (None, "RuntimeDefault", "Localhost"):
            out.append(f"{where}.appArmorProfile.type must be RuntimeDefault or Localhost")
    return out


def _restricted(spec: Mapping[str, Any]) -> list[str]:
    out: list[str] = []
    for v in spec.get("volumes") or ():
        kinds = set(v) - _VOLUME_SOURCE_KEYS
        bad = sorted(kinds - RESTRICTED_VOLUMES)
        if bad:
            out.append(f"volume {v.get('name')!r}: type {', '.join(bad)} is not allowed (restricted allows "
                       f"{', '.join(sorted(RESTRICTED_VOLUMES))})")
    psc = _sc(spec)
    pod_non_root = psc.get("runAsNonRoot")
    pod_seccomp = (psc.get("seccompProfile") or {}).get("type")
    if psc.get("runAsUser") == 0:
        out.append("spec.securityContext.runAsUser must not be 0")
    if pod_non_root is False:
        out.append("spec.securityContext.runAsNonRoot must not be false")
    for where, c in _containers(spec):
        csc = _sc(c)
        if csc.get("allowPrivilegeEscalation") is not False:
            out.append(f"{where}.securityContext.allowPrivilegeEscalation must be false")
        non_root = csc.get("runAsNonRoot", pod_non_root)
        if non_root is not True:
            out.append(f"{where}: runAsNonRoot must be true (in the Pod's or the container's securityContext)")
        if csc.get("runAsUser") == 0:
            out.append(f"{where}.securityContext.runAsUser must not be 0")
        seccomp = (csc.get("seccompProfile") or {}).get("type", pod_seccomp)
        if seccomp not in ("RuntimeDefault", "Localhost"):
            out.append(f"{where}: seccompProfile.type must be RuntimeDefault or Localhost (in the Pod's or the "
                       "container's securityContext)")
        caps = csc.get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or ()):
            out.append(f"{where}.securityContext.capabilities.drop must include ALL")
        extra = [cap for cap in caps.get("add") or () if cap != "NET_BIND_SERVICE"]
        if extra:
            out.append(f"{where}.securityContext.capabilities.add may only add NET_BIND_SERVICE, not "
                       f"{', '.join(extra)}")
    return out


def check(pod_spec: Mapping[str, Any], level: str) -> list[str]:
    """The violations of ``level`` (``privileged``, ``baseline`` or ``restricted``) by a Pod spec."""
    if level not in LEVELS:
        raise ValueError(f"unknown Pod Security level {level!r} (one of {', '.join(LEVELS)})")
    if level == "privileged":
        return []
    out = _baseline(pod_spec)
    if level == "restricted":
        out += _restricted(pod_spec)
    return out


def pod_spec_of(body: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The Pod spec inside a Pod, Deployment/StatefulSet/DaemonSet/ReplicaSet/Job or CronJob body, or None."""
    kind = body.get("kind")
    spec = body.get("spec") or {}
    if kind == "Pod":
        return spec
    if kind in ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job", "ReplicationController"):
        return (spec.get("template") or {}).get("spec") or {}
    if kind == "CronJob":
        return (((spec.get("jobTemplate") or {}).get("spec") or {}).get("template") or {}).get("spec") or {}
    return None


def enforced_level(namespace_labels: Mapping[str, str] | None) -> str:
    """The level a namespace enforces (``privileged`` when unlabelled)."""
    level = (namespace_labels or {}).get(ENFORCE_LABEL, "privileged")
    return level if level in LEVELS else "restricted"  # an unknown value: the strictest, as the admission does not
