"""A real Kubernetes control plane on loopback for the control-plane tier (``make e2e-control-plane``).

Starts the binaries that ``make k8s-control-plane`` builds from their Go modules (``.tools/bin``):

- **etcd** (one member, client and peer URLs on 127.0.0.1, its data in the work dir);
- **kube-apiserver** on ``https://127.0.0.1:<port>``: a serving certificate from a CA made here with ``cryptography``,
  a static token file for the test's administrator (``system:masters``), a ServiceAccount token signer (RSA key
  pair; TokenRequest works), ``--authorization-mode=Node,RBAC``, the default admission plugins plus ``PodSecurity``
  and ``NodeRestriction``; the project's CRDs (``crds/``) are created and waited on until ``Established``;
- **kube-controller-manager** with the garbage collector, Job, CronJob, namespace, ServiceAccount and
  ServiceAccount-token controllers (and the root-CA publisher that fills ``kube-root-ca.crt``) and the ClusterRole
  aggregation controller, no leader election.

Every wait is on a condition with a deadline (``/readyz``, ``/healthz``, the ``default`` ServiceAccount that the
controller manager creates, the CRDs' ``Established``). ``stop()`` ends the processes it started, by PID (SIGTERM,
then SIGKILL), and the work dir holds their logs. Only loopback addresses are used: the Service CIDR is only a range
of numbers the API server hands out to ClusterIP Services; nothing here sends traffic to it.

``RealAPI`` offers the same synchronous object calls as the emulator (``put_object``, ``get_object``,
``list_objects``, ``patch_object``, ``call_delete``) over HTTPS, so ``operator_env.Env`` and the scenarios run
unchanged against either.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import datetime
import ipaddress
import json
import os
import secrets
import signal
import ssl
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID

from scm_server.ports import free_port

Obj = dict[str, Any]
REPO = Path(__file__).resolve().parents[3]
TOOLS_BIN = REPO / ".tools" / "bin"
CRDS = REPO / "crds"
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"
# Numbers only: ClusterIPs are allocated from it; no process here listens on or connects to them.
SERVICE_CIDR = "10.96.0.0/16"
CONTROLLERS = ("garbagecollector", "job", "cronjob", "namespace", "serviceaccount", "serviceaccount-token",
               "root-ca-cert-publisher", "ttl-after-finished", "clusterrole-aggregation")
ADMISSION = ("NamespaceLifecycle", "LimitRanger", "ServiceAccount", "DefaultStorageClass", "PodSecurity",
             "NodeRestriction", "StorageObjectInUseProtection", "DefaultTolerationSeconds", "ResourceQuota",
             "MutatingAdmissionWebhook", "ValidatingAdmissionWebhook", "ValidatingAdmissionPolicy")
ADMIN_USER = "ozone-scm-test-admin"
RESTRICTED = {"pod-security.kubernetes.io/enforce": "restricted", "pod-security.kubernetes.io/enforce-version": "latest",
              "pod-security.kubernetes.io/warn": "restricted", "pod-security.kubernetes.io/audit": "restricted"}

# (apiVersion, kind) -> (plural, namespaced): the kinds the scenarios and the comparison test touch.
KINDS: dict[tuple[str, str], tuple[str, bool]] = {
    ("v1", "Namespace"): ("namespaces", False),
    ("v1", "Node"): ("nodes", False),
    ("v1", "Pod"): ("pods", True),
    ("v1", "Service"): ("services", True),
    ("v1", "ConfigMap"): ("configmaps", True),
    ("v1", "Secret"): ("secrets", True),
    ("v1", "ServiceAccount"): ("serviceaccounts", True),
    ("v1", "PersistentVolumeClaim"): ("persistentvolumeclaims", True),
    ("v1", "PersistentVolume"): ("persistentvolumes", False),
    ("v1", "Event"): ("events", True),
    ("events.k8s.io/v1", "Event"): ("events", True),
    ("policy/v1", "PodDisruptionBudget"): ("poddisruptionbudgets", True),
    ("batch/v1", "Job"): ("jobs", True),
    ("batch/v1", "CronJob"): ("cronjobs", True),
    ("apps/v1", "Deployment"): ("deployments", True),
    ("coordination.k8s.io/v1", "Lease"): ("leases", True),
    ("rbac.authorization.k8s.io/v1", "Role"): ("roles", True),
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): ("rolebindings", True),
    ("rbac.authorization.k8s.io/v1", "ClusterRole"): ("clusterroles", False),
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"): ("clusterrolebindings", False),
    ("apiextensions.k8s.io/v1", "CustomResourceDefinition"): ("customresourcedefinitions", False),
    ("ozone-scm.io/v1alpha1", "OzoneSCMCluster"): ("ozonescmclusters", True),
    ("ozone-scm.io/v1alpha1", "OzoneSCMAudit"): ("ozonescmaudits", True),
    ("ozone-scm.io/v1alpha1", "OzoneSCMBackup"): ("ozonescmbackups", True),
}


class ControlPlaneError(RuntimeError):
    pass


class ApiError(Exception):
    """An HTTP error from the API server, with its Status object (``message`` is the server's own words)."""

    def __init__(self, status: int, body: Any, what: str) -> None:
        self.status = status
        self.body = body
        message = body.get("message") if isinstance(body, dict) else str(body)
        super().__init__(f"{what}: HTTP {status}: {message}")


def binary(name: str) -> Path:
    path = TOOLS_BIN / name
    if not os.access(path, os.X_OK):
        raise ControlPlaneError(f"{path} is missing: build the control plane with `make k8s-control-plane` "
                                "(make e2e-control-plane does it first)")
    return path


# ---- PKI -----------------------------------------------------------------------------------------------------------
@dataclasses.dataclass
class Pki:
    ca_crt: Path
    ca_key: Path
    serving_crt: Path
    serving_key: Path
    sa_key: Path
    sa_pub: Path
    kubelet_client_crt: Path
    kubelet_client_key: Path


def _pem_key(key: Any) -> bytes:
    out: bytes = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                   serialization.NoEncryption())
    return out


def make_pki(d: Path, ips: tuple[str, ...] = ("127.0.0.1", "10.96.0.1")) -> Pki:
    """A self-signed CA, a serving certificate for the API server (loopback names, the in-cluster names and
    ``ips``: its own address and the ``kubernetes`` Service's), the ServiceAccount token signing key pair, and the
    API server's client certificate for kubelets (``system:masters``; used only where a real kubelet runs)."""
    d.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "ozone-scm-test-kubernetes-ca")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
          .not_valid_after(now + datetime.timedelta(days=2))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False, data_encipherment=False,
                                       key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    names = ["localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
             "kubernetes.default.svc.cluster.local"]
    san = x509.SubjectAlternativeName([*(x509.DNSName(n) for n in names),
                                       *(x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips)])
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(san, critical=False)
            .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    client_key = ec.generate_private_key(ec.SECP256R1())
    client = (x509.CertificateBuilder()
              .subject_name(x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:masters"),
                                       x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver-kubelet-client")]))
              .issuer_name(ca_name).public_key(client_key.public_key()).serial_number(x509.random_serial_number())
              .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=2))
              .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
              .sign(ca_key, hashes.SHA256()))
    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pki = Pki(ca_crt=d / "ca.crt", ca_key=d / "ca.key", serving_crt=d / "apiserver.crt",
              serving_key=d / "apiserver.key", sa_key=d / "sa.key", sa_pub=d / "sa.pub",
              kubelet_client_crt=d / "apiserver-kubelet-client.crt",
              kubelet_client_key=d / "apiserver-kubelet-client.key")
    pki.kubelet_client_crt.write_bytes(client.public_bytes(serialization.Encoding.PEM))
    pki.kubelet_client_key.write_bytes(_pem_key(client_key))
    pki.ca_crt.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    pki.ca_key.write_bytes(_pem_key(ca_key))
    pki.serving_crt.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    pki.serving_key.write_bytes(_pem_key(key))
    pki.sa_key.write_bytes(_pem_key(sa_key))
    pki.sa_pub.write_bytes(sa_key.public_key().public_bytes(serialization.Encoding.PEM,
                                                             serialization.PublicFormat.SubjectPublicKeyInfo))
    for p in (pki.ca_key, pki.serving_key, pki.sa_key, pki.kubelet_client_key):
        p.chmod(0o600)
    return pki


def kubeconfig(path: Path, server: str, ca_crt: Path, token: str, namespace: str = "default") -> Path:
    """A kubeconfig for ``kubectl``, ``helm``, the controller manager and the operator."""
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "test",
        "clusters": [{"name": "test", "cluster": {"server": server, "certificate-authority": str(ca_crt)}}],
        "users": [{"name": "test", "user": {"token": token}}],
        "contexts": [{"name": "test", "context": {"cluster": "test", "user": "test", "namespace": namespace}}],
    }))
    path.chmod(0o600)
    return path


# ---- a synchronous client with the emulator's object calls ---------------------------------------------------------
class RealAPI:
    """``put_object`` / ``get_object`` / ``list_objects`` / ``patch_object`` / ``call_delete`` against a real API
    server, as the given bearer token (the emulator's direct calls, over HTTPS)."""

    def __init__(self, url: str, ca_crt: Path | None, token: str | None) -> None:
        """``ca_crt`` and ``token`` None: plain HTTP without authentication (the emulator)."""
        self.url = url.rstrip("/")
        self.token = token
        self.ctx = ssl.create_default_context(cafile=str(ca_crt)) if ca_crt is not None else None
        self.warnings: list[str] = []
        self.last_status = 0

    def request(self, method: str, path: str, body: Any = None, *, content_type: str = "application/json",
                params: Mapping[str, str] | None = None, timeout: float = 30, raw: bool = False) -> Any:
        """One request; the decoded JSON answer (``raw``: the bytes, e.g. a watch stream), ``ApiError`` on 4xx/5xx."""
        url = self.url + path + (("?" + urllib.parse.urlencode(params)) if params else "")
        data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
        headers = {"Content-Type": content_type, "Accept": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        req = urllib.request.Request(url, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, context=self.ctx, timeout=timeout) as resp:
                self.warnings += resp.headers.get_all("Warning") or []
                self.last_status = resp.status
                text = resp.read()
        except urllib.error.HTTPError as exc:
            self.last_status = exc.code
            answer = exc.read()
            try:
                payload = json.loads(answer)
            except ValueError:
                payload = answer.decode(errors="replace")
            raise ApiError(exc.code, payload, f"{method} {path}") from None
        if raw:
            return text
        return json.loads(text) if text else None

    def readyz(self) -> bool:
        req = urllib.request.Request(self.url + "/readyz", headers={"Authorization": f"Bearer {self.token}"}
                                     if self.token else {})
        try:
            with urllib.request.urlopen(req, context=self.ctx, timeout=5) as resp:
                return bool(resp.status == 200 and resp.read().strip() == b"ok")
        except urllib.error.HTTPError:
            return False

    @staticmethod
    def path(api_version: str, kind: str, namespace: str | None = None, name: str | None = None) -> str:
        try:
            plural, namespaced = KINDS[(api_version, kind)]
        except KeyError:
            raise KeyError(f"unknown kind {api_version}/{kind}") from None
        base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
        if namespaced and namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{plural}"
        return base + (f"/{name}" if name else "")

    def put_object(self, obj: Mapping[str, Any]) -> Obj:
        meta = obj.get("metadata") or {}
        out: Obj = self.request("POST", self.path(obj["apiVersion"], obj["kind"], meta.get("namespace")), obj)
        return out

    def get_object(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> Obj | None:
        try:
            out: Obj = self.request("GET", self.path(api_version, kind, namespace, name))
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise
        return out

    def list_objects(self, api_version: str, kind: str, namespace: str | None = None) -> list[Obj]:
        listing = self.request("GET", self.path(api_version, kind, namespace))
        items: list[Obj] = listing.get("items") or []
        for o in items:  # lists carry kind/apiVersion on the list only, the emulator on each item
            o.setdefault("apiVersion", api_version)
            o.setdefault("kind", kind)
        return sorted(items, key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"]["name"]))

    def patch_object(self, api_version: str, kind: str, name: str, namespace: str | None, patch: Mapping[str, Any],
                     subresource: str | None = None) -> Obj:
        path = self.path(api_version, kind, namespace, name) + (f"/{subresource}" if subresource else "")
        out: Obj = self.request("PATCH", path, patch, content_type="application/merge-patch+json")
        return out

    def call_delete(self, api_version: str, kind: str, name: str, namespace: str | None = None,
                    options: Mapping[str, Any] | None = None) -> Obj:
        out: Obj = self.request("DELETE", self.path(api_version, kind, namespace, name), dict(options or {}))
        return out

    def service_account_token(self, namespace: str, name: str, seconds: int = 7200) -> str:
        """A token for a ServiceAccount from the TokenRequest API (as the kubelet gets one for a Pod)."""
        out = self.request("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token", {
            "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
            "spec": {"audiences": [SERVICE_ACCOUNT_ISSUER], "expirationSeconds": seconds}})
        return str(out["status"]["token"])

    def create_namespace(self, name: str, labels: Mapping[str, str] | None = None) -> Obj:
        return self.put_object({"apiVersion": "v1", "kind": "Namespace",
                                "metadata": {"name": name, "labels": dict(labels or {})}})


# ---- the processes -------------------------------------------------------------------------------------------------
def wait_until(predicate: Callable[[], Any], timeout: float, what: str, *, poll: float = 0.2,
               alive: Callable[[], None] | None = None) -> Any:
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while True:
        if alive is not None:
            alive()
        try:
            value = predicate()
            if value:
                return value
        except (OSError, ApiError, ValueError, KeyError) as exc:
            last = exc
        if time.monotonic() > deadline:
            raise ControlPlaneError(f"{what}: not reached within {timeout:.0f}s" + (f" (last error: {last})"
                                                                                    if last else ""))
        time.sleep(poll)


@dataclasses.dataclass
class Proc:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    def check_alive(self) -> None:
        code = self.popen.poll()
        if code is not None:
            tail = self.log.read_text(errors="replace")[-4000:] if self.log.exists() else ""
            raise ControlPlaneError(f"{self.name} exited with {code}; the end of {self.log}:\n{tail}")

    def stop(self, grace: float = 15) -> None:
        if self.popen.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.popen.pid, signal.SIGTERM)
        try:
            self.popen.wait(grace)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.popen.pid, signal.SIGKILL)
            self.popen.wait(10)


@dataclasses.dataclass(frozen=True)
class Placement:
    """Where the control plane runs. The default: the host's loopback, ClusterIPs only numbers. The node tier
    (``tests/e2e/node``) puts it inside the node's network namespace: ``address`` is the node's own address there,
    ``wrap`` the command prefix that enters the namespaces, ``join`` runs in each child before exec (the tier's
    cgroup), and the API server gets the kubelet client certificate and the node's and kube-proxy's tokens."""

    address: str = "127.0.0.1"
    service_cidr: str = SERVICE_CIDR
    controllers: tuple[str, ...] = CONTROLLERS
    wrap: tuple[str, ...] = ()
    join: Callable[[], None] | None = None
    extra_tokens: tuple[tuple[str, str, str], ...] = ()  # (token, user, comma-separated groups)
    kubelet_client: bool = False
    endpoint_reconciler: str = "none"  # "lease": the `kubernetes` Service gets the API server's address
    kubelet_address_types: str = "Hostname"

    @property
    def kubernetes_service_ip(self) -> str:
        return str(next(ipaddress.ip_network(self.service_cidr).hosts()))


class ControlPlane:
    """etcd, kube-apiserver and kube-controller-manager on loopback. ``with ControlPlane(workdir) as cp:``."""

    def __init__(self, workdir: Path, *, startup_timeout: float = 180, placement: Placement | None = None) -> None:
        self.workdir = workdir
        self.startup_timeout = startup_timeout
        self.placement = placement or Placement()
        self.procs: list[Proc] = []
        self.admin_token = secrets.token_urlsafe(32)
        self.port = 0
        self.url = ""
        self.pki: Pki | None = None
        self.admin_kubeconfig = workdir / "admin.kubeconfig"
        self.timings: dict[str, float] = {}

    def __enter__(self) -> ControlPlane:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def ca_crt(self) -> Path:
        assert self.pki is not None
        return self.pki.ca_crt

    def admin(self) -> RealAPI:
        return RealAPI(self.url, self.ca_crt, self.admin_token)

    def _spawn(self, name: str, argv: list[str]) -> Proc:
        log = self.workdir / f"{name}.log"
        out = open(log, "wb")  # noqa: SIM115 - handed to the child
        try:
            popen = subprocess.Popen([*self.placement.wrap, *argv], stdout=out, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, cwd=self.workdir, start_new_session=True,
                                     preexec_fn=self._preexec)
        finally:
            out.close()
        proc = Proc(name, popen, log)
        self.procs.append(proc)
        return proc

    def _preexec(self) -> None:
        _die_with_parent()
        if self.placement.join is not None:
            self.placement.join()

    def start(self) -> None:
        t0 = time.monotonic()
        etcd_bin, apiserver_bin, kcm_bin = binary("etcd"), binary("kube-apiserver"), binary("kube-controller-manager")
        self.workdir.mkdir(parents=True, exist_ok=True)
        at = self.placement
        ip = at.address
        self.pki = pki = make_pki(self.workdir / "pki", tuple(dict.fromkeys((ip, "127.0.0.1",
                                                                              at.kubernetes_service_ip))))
        # etcd: one member on loopback; fsync off (a test store, thrown away with the work dir)
        client, peer = free_port(), free_port()
        etcd_url = f"http://{ip}:{client}"
        etcd = self._spawn("etcd", [
            str(etcd_bin), "--name", "ozone-scm-test", "--data-dir", str(self.workdir / "etcd"),
            "--listen-client-urls", etcd_url, "--advertise-client-urls", etcd_url,
            "--listen-peer-urls", f"http://{ip}:{peer}", "--initial-advertise-peer-urls",
            f"http://{ip}:{peer}", "--initial-cluster", f"ozone-scm-test=http://{ip}:{peer}",
            "--listen-metrics-urls", f"http://{ip}:{free_port()}", "--unsafe-no-fsync", "--log-level", "warn"])
        wait_until(lambda: _http_ok(f"{etcd_url}/health"), 60, "etcd /health", alive=etcd.check_alive)
        self.timings["etcd"] = time.monotonic() - t0
        tokens = self.workdir / "tokens.csv"
        tokens.write_text("".join(f'{token},{user},{user},"{groups}"\n' for token, user, groups in (
            (self.admin_token, ADMIN_USER, "system:masters"), *at.extra_tokens)))
        tokens.chmod(0o600)
        self.port = free_port()
        self.url = f"https://{ip}:{self.port}"
        kubelet_client = ["--kubelet-client-certificate", str(pki.kubelet_client_crt), "--kubelet-client-key",
                          str(pki.kubelet_client_key)] if at.kubelet_client else []
        apiserver = self._spawn("kube-apiserver", [
            str(apiserver_bin), "--etcd-servers", etcd_url, "--bind-address", ip,
            "--advertise-address", ip, "--secure-port", str(self.port), *kubelet_client,
            "--tls-cert-file", str(pki.serving_crt), "--tls-private-key-file", str(pki.serving_key),
            "--client-ca-file", str(pki.ca_crt), "--token-auth-file", str(tokens),
            "--service-account-issuer", SERVICE_ACCOUNT_ISSUER, "--api-audiences", SERVICE_ACCOUNT_ISSUER,
            "--service-account-key-file", str(pki.sa_pub), "--service-account-signing-key-file", str(pki.sa_key),
            "--service-cluster-ip-range", at.service_cidr, "--authorization-mode", "Node,RBAC",
            "--enable-admission-plugins", ",".join(ADMISSION), "--endpoint-reconciler-type", at.endpoint_reconciler,
            "--allow-privileged=false", "--profiling=false", "--kubelet-preferred-address-types",
            at.kubelet_address_types,
            "--v", "1"])
        admin = self.admin()
        wait_until(admin.readyz, self.startup_timeout, "kube-apiserver /readyz", poll=0.3,
                   alive=apiserver.check_alive)
        self.timings["kube-apiserver ready"] = time.monotonic() - t0
        kubeconfig(self.admin_kubeconfig, self.url, pki.ca_crt, self.admin_token)
        kcm = self._spawn("kube-controller-manager", [
            str(kcm_bin), "--kubeconfig", str(self.admin_kubeconfig),
            "--authentication-kubeconfig", str(self.admin_kubeconfig),
            "--authorization-kubeconfig", str(self.admin_kubeconfig), "--bind-address", ip,
            "--secure-port", str(free_port()), "--controllers", ",".join(at.controllers), "--leader-elect=false",
            "--service-account-private-key-file", str(pki.sa_key), "--root-ca-file", str(pki.ca_crt),
            "--use-service-account-credentials=false", "--concurrent-gc-syncs", "5", "--v", "1"])
        self.apply_crds(admin)
        # the ServiceAccount controller makes `default` in every namespace: the controller manager is working
        wait_until(lambda: admin.get_object("v1", "ServiceAccount", "default", "default"), self.startup_timeout,
                   "kube-controller-manager (the default ServiceAccount)", poll=0.3, alive=kcm.check_alive)
        self.timings["kube-controller-manager working"] = time.monotonic() - t0

    def apply_crds(self, admin: RealAPI) -> None:
        names = []
        for path in sorted(CRDS.glob("*.yaml")):
            for doc in yaml.safe_load_all(path.read_text()):
                if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition":
                    admin.put_object(doc)
                    names.append(doc["metadata"]["name"])

        def established() -> bool:
            for n in names:
                crd = admin.get_object("apiextensions.k8s.io/v1", "CustomResourceDefinition", n) or {}
                conds = {c["type"]: c["status"] for c in (crd.get("status") or {}).get("conditions") or ()}
                if conds.get("Established") != "True":
                    return False
            return True

        wait_until(established, 60, f"CRDs {names} Established")

    def check_alive(self) -> None:
        for p in self.procs:
            p.check_alive()

    def stop(self) -> None:
        for p in reversed(self.procs):
            p.stop()
        self.procs.clear()


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL when the test process dies (a killed pytest leaves no control plane)."""
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _http_ok(url: str) -> bool:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return bool(resp.status == 200)

