"""Backups in S3-compatible object storage: ``admin scm backup upload|download|delete`` with ``s3://bucket/prefix/``.

A backup in object storage is the backup directory (``metadata/backup.py``) file by file under one key prefix:
``<prefix>scm.db.tar.gz``, ``<prefix>keys/...`` (only with ``--include-keys``) and ``<prefix>manifest.json``.

* **upload** checks the local backup first (``verify_backup``), refuses a prefix that holds anything (nothing is
  overwritten), puts every file the manifest lists, checks their sizes in a listing, and puts the manifest
  **last**: a prefix without a manifest is an upload that did not finish, never a backup;
* **download** reads the manifest first (none: not a backup), fetches every file it lists into a new or empty
  directory (key files created 0600 before a byte is written), writes the manifest last and runs ``verify_backup``
  on the result; on any failure it removes what it wrote. A directory that already holds this very backup (the
  same manifest, from an earlier run of the same init container) is only verified again;
* **delete** removes the manifest **first** (a half-deleted backup is never taken for a whole one), then the rest,
  and only when every object under the prefix is a backup file name (a mistyped prefix removes nothing else).

The S3 client is MinIO's SDK (``minio``), which signs requests (SigV4) for any S3-compatible server. Credentials
come from the standard environment variables only (``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, optional
``AWS_SESSION_TOKEN``): no instance-metadata lookup or other network discovery. The endpoint is given (flag, or
``AWS_ENDPOINT_URL_S3`` / ``AWS_ENDPOINT_URL``), with an optional CA bundle for HTTPS. Every error is one line
saying what to do (:class:`ObjectStoreError`).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import logging
import os
import re
import shutil
import ssl
import urllib.parse
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

import certifi
import urllib3
from minio import Minio
from minio.error import InvalidResponseError, MinioException, S3Error

from scm_server.metadata.backup import (
    KEYS_DIR,
    MANIFEST,
    BackupError,
    Manifest,
    prepare_out_dir,
    verify_backup,
)

T = TypeVar("T")

ENV_ENDPOINT = ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")
ENV_CA_BUNDLE = "AWS_CA_BUNDLE"
DEFAULT_REGION = "us-east-1"
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_CHUNK = 1 << 20


class ObjectStoreError(Exception):
    """An object-storage step that failed: one line, what is wrong and what to do."""


def _is_url(text: str) -> bool:
    return text.startswith("s3://")


def is_s3_url(text: str) -> bool:
    """Whether a backup location names object storage (``s3://...``) rather than a directory."""
    return _is_url(text)


@dataclasses.dataclass(frozen=True)
class S3Url:
    """``s3://bucket/prefix/``: the prefix is never empty and always ends with ``/``."""

    bucket: str
    prefix: str

    def key(self, rel: str) -> str:
        return self.prefix + rel

    def __str__(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"


def parse_s3_url(text: str) -> S3Url:
    """``s3://bucket/prefix/name/`` -> :class:`S3Url`; a one-line error for anything else."""
    if not _is_url(text):
        raise ObjectStoreError(f"{text!r} is not an s3:// URL; give s3://<bucket>/<prefix>/<name>/")
    rest = text[len("s3://"):]
    bucket, _, prefix = rest.partition("/")
    if not _BUCKET.match(bucket) or ".." in bucket:
        raise ObjectStoreError(
            f"{text!r}: {bucket!r} is not a valid bucket name (3-63 lowercase letters, digits, dots, hyphens); "
            "give s3://<bucket>/<prefix>/<name>/"
        )
    parts = [p for p in prefix.split("/")]
    if parts and parts[-1] == "":
        parts = parts[:-1]
    if not parts:
        raise ObjectStoreError(f"{text!r} names no prefix under the bucket; give s3://{bucket}/<prefix>/<name>/ "
                               "(a backup never goes to a bucket's root)")
    if any(p in ("", ".", "..") for p in parts):
        raise ObjectStoreError(f"{text!r}: empty, '.' or '..' path segments are not allowed in the prefix")
    return S3Url(bucket, "/".join(parts) + "/")


@dataclasses.dataclass(frozen=True)
class S3Settings:
    endpoint: str  # scheme://host[:port]
    access_key: str
    secret_key: str
    session_token: str | None = None
    region: str = DEFAULT_REGION
    ca_bundle: Path | None = None

    @staticmethod
    def from_env(endpoint: str | None, ca_bundle: Path | None, env: Mapping[str, str] | None = None) -> S3Settings:
        """The endpoint (given, else ``AWS_ENDPOINT_URL_S3`` / ``AWS_ENDPOINT_URL``), the keys from the standard
        variables, the region (``AWS_REGION`` / ``AWS_DEFAULT_REGION``, default us-east-1), the CA bundle (given,
        else ``AWS_CA_BUNDLE``)."""
        env = os.environ if env is None else env
        endpoint = endpoint or next((env[k] for k in ENV_ENDPOINT if env.get(k)), None)
        if not endpoint:
            raise ObjectStoreError("no S3 endpoint: give --endpoint-url URL or set AWS_ENDPOINT_URL "
                                   "(e.g. https://s3.eu-west-1.amazonaws.com, or your server's http(s)://host:port)")
        access, secret = env.get("AWS_ACCESS_KEY_ID"), env.get("AWS_SECRET_ACCESS_KEY")
        if not access or not secret:
            raise ObjectStoreError("no S3 credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY "
                                   "(and AWS_SESSION_TOKEN for temporary ones)")
        if ca_bundle is None and env.get(ENV_CA_BUNDLE):
            ca_bundle = Path(env[ENV_CA_BUNDLE])
        return S3Settings(
            endpoint=endpoint, access_key=access, secret_key=secret,
            session_token=env.get("AWS_SESSION_TOKEN") or None,
            region=env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or DEFAULT_REGION,
            ca_bundle=ca_bundle,
        )


def _split_endpoint(endpoint: str) -> tuple[str, bool]:
    u = urllib.parse.urlsplit(endpoint)
    if u.scheme not in ("http", "https") or not u.hostname or u.path not in ("", "/") or u.query:
        raise ObjectStoreError(f"S3 endpoint {endpoint!r} is not http(s)://host[:port]; give the server's base URL")
    try:
        port = u.port
    except ValueError as exc:
        raise ObjectStoreError(f"S3 endpoint {endpoint!r} has a bad port; give http(s)://host[:port]") from exc
    host = f"[{u.hostname}]" if ":" in u.hostname else u.hostname
    return (f"{host}:{port}" if port else host), u.scheme == "https"


def make_client(settings: S3Settings) -> Minio:
    netloc, secure = _split_endpoint(settings.endpoint)
    # urllib3 logs each retry as a warning: the command's error stays one line (the last failure says it all)
    logging.getLogger("urllib3").setLevel(logging.ERROR)
    if settings.ca_bundle is not None and not settings.ca_bundle.is_file():
        raise ObjectStoreError(f"CA bundle {settings.ca_bundle} does not exist; give a PEM file of the CA(s) that "
                               "signed the S3 server's certificate")
    http = urllib3.PoolManager(
        timeout=urllib3.Timeout(connect=10.0, read=120.0),
        # retried: connections refused or timed out, 5xx answers; never a TLS failure (retrying cannot fix it)
        retries=urllib3.Retry(total=3, connect=2, read=1, other=0, backoff_factor=0.2,
                              status_forcelist=(500, 502, 503, 504)),
        cert_reqs="CERT_REQUIRED",
        ca_certs=str(settings.ca_bundle) if settings.ca_bundle else certifi.where(),
    )
    return Minio(netloc, access_key=settings.access_key, secret_key=settings.secret_key,
                 session_token=settings.session_token, secure=secure, region=settings.region, http_client=http)


def _is_backup_file(rel: str) -> bool:
    if rel in (MANIFEST, "scm.db.tar.gz"):
        return True
    head, _, name = rel.partition("/")
    return head == KEYS_DIR and bool(name) and "/" not in name


def _safe_rel(url: S3Url, rel: str) -> str:
    parts = rel.split("/")
    if not rel or rel.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise ObjectStoreError(f"{url}: the manifest lists a file named {rel!r}; refusing it (the backup is corrupt "
                               "or not ours)")
    return rel


class BackupStore:
    """One backup's prefix in one bucket (``url``), reached through ``client``."""

    def __init__(self, client: Minio, url: S3Url, endpoint: str = "") -> None:
        self.client = client
        self.url = url
        self.endpoint = endpoint

    # ---- errors ----

    def _call(self, what: str, fn: Callable[[], T]) -> T:
        try:
            return fn()
        except S3Error as exc:
            raise self._s3_error(what, exc) from exc
        except InvalidResponseError as exc:
            raise ObjectStoreError(f"{what}: the S3 endpoint {self.endpoint} answered HTTP {exc._code} with no S3 "
                                   "error body; is it an S3 server?") from exc
        except urllib3.exceptions.MaxRetryError as exc:
            reason = exc.reason
            if isinstance(reason, (urllib3.exceptions.SSLError, ssl.SSLError)):
                raise ObjectStoreError(f"{what}: TLS with {self.endpoint} failed ({_line(str(reason))}); give the CA that signed "
                                       "its certificate with --ca-bundle (or AWS_CA_BUNDLE)") from exc
            raise ObjectStoreError(f"{what}: cannot reach the S3 endpoint {self.endpoint} ({_line(str(reason))}); check "
                                   "--endpoint-url / AWS_ENDPOINT_URL") from exc
        except (urllib3.exceptions.HTTPError, OSError, MinioException) as exc:
            raise ObjectStoreError(f"{what}: {type(exc).__name__}: {_line(str(exc))} (endpoint {self.endpoint})") from exc

    def _s3_error(self, what: str, exc: S3Error) -> ObjectStoreError:
        code = exc.code or ""
        if code == "NoSuchBucket":
            return ObjectStoreError(f"{what}: bucket {self.url.bucket} does not exist at {self.endpoint}; create it "
                                    "first (backups never create buckets)")
        if code in ("InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied", "InvalidToken",
                    "ExpiredToken"):
            return ObjectStoreError(f"{what}: the S3 server refused the request ({code}); check AWS_ACCESS_KEY_ID, "
                                    "AWS_SECRET_ACCESS_KEY and the user's rights on the bucket")
        return ObjectStoreError(f"{what}: S3 error {code or exc.response.status}: {_line(exc.message or '')}")

    # ---- primitives ----

    def _require_bucket(self, what: str) -> None:
        if not self._call(what, lambda: self.client.bucket_exists(self.url.bucket)):
            raise ObjectStoreError(f"{what}: bucket {self.url.bucket} does not exist at {self.endpoint}; create it "
                                   "first (backups never create buckets)")

    def objects(self) -> dict[str, int]:
        """Every object under the prefix: path relative to it -> size."""
        def listing() -> dict[str, int]:
            out: dict[str, int] = {}
            for o in self.client.list_objects(self.url.bucket, prefix=self.url.prefix, recursive=True):
                name = o.object_name or ""
                out[name[len(self.url.prefix):]] = int(o.size or 0)
            return out
        return self._call(f"listing {self.url}", listing)

    def _put(self, rel: str, path: Path, sha256: str) -> None:
        size = path.stat().st_size

        def put() -> None:
            # over plain HTTP the signature covers the payload's sha256 (the server checks it); under TLS the
            # channel does; the file's own sha256 rides along as x-amz-meta-sha256
            with path.open("rb") as f:
                self.client.put_object(self.url.bucket, self.url.key(rel), f, size, metadata={"sha256": sha256})
        self._call(f"uploading {rel} to {self.url}", put)

    def _get_to(self, rel: str, out: BinaryIO) -> int:
        def get() -> int:
            resp = self.client.get_object(self.url.bucket, self.url.key(rel))
            n = 0
            try:
                for chunk in resp.stream(_CHUNK):
                    out.write(chunk)
                    n += len(chunk)
            finally:
                resp.close()
                resp.release_conn()
            return n
        return self._call(f"downloading {rel} from {self.url}", get)

    # ---- the three operations ----

    def upload(self, backup: Path) -> Manifest:
        """Verify ``backup`` locally, then put its files and, last, its manifest under the (empty) prefix."""
        try:
            m = verify_backup(backup)
        except BackupError as exc:
            raise ObjectStoreError(f"{exc}; nothing was uploaded") from exc
        self._require_bucket(f"uploading to {self.url}")
        existing = self.objects()
        if existing:
            first = sorted(existing)[0]
            raise ObjectStoreError(f"{self.url} already holds {len(existing)} object(s) (e.g. {first}); nothing is "
                                   "overwritten: choose a new prefix for this backup")
        files: dict[str, Any] = m.raw["files"]
        for rel in sorted(files):
            self._put(_safe_rel(self.url, rel), backup / rel, str(files[rel]["sha256"]))
        stored = self.objects()
        for rel, meta in sorted(files.items()):
            if stored.get(rel) != int(meta["size"]):
                raise ObjectStoreError(f"{self.url}: {rel} is stored as {stored.get(rel)} bytes, the manifest says "
                                       f"{meta['size']}; the upload is incomplete (no manifest written): retry into a "
                                       "new prefix")
        manifest = backup / MANIFEST
        self._put(MANIFEST, manifest, _sha256(manifest))
        return m

    def download(self, dest: Path, cluster_id: str | None = None) -> Manifest:
        """The manifest, every file it lists, into ``dest`` (new or empty), then ``verify_backup`` on it."""
        what = f"downloading {self.url}"
        self._require_bucket(what)
        raw_manifest = self._manifest_bytes(what)
        try:
            raw = json.loads(raw_manifest)
            files = dict(raw["files"])
        except (ValueError, KeyError, TypeError) as exc:
            raise ObjectStoreError(f"{self.url}{MANIFEST} is not a backup manifest ({exc}); the backup is corrupt, "
                                   "use another one") from exc
        rels = [_safe_rel(self.url, str(rel)) for rel in sorted(files)]
        local = dest / MANIFEST
        if local.is_file() and local.read_bytes() == raw_manifest:
            # this very backup was downloaded here before (an init container run again): check it, fetch nothing
            try:
                return verify_backup(dest, cluster_id)
            except BackupError as exc:
                raise ObjectStoreError(f"{dest} holds this backup from an earlier download, but: {exc}; empty the "
                                       "directory and download again") from exc
        try:
            prepare_out_dir(dest)
        except BackupError as exc:
            raise ObjectStoreError(str(exc)) from exc
        try:
            for rel in rels:
                target = dest / rel
                if rel.startswith(KEYS_DIR + "/"):
                    target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
                    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                    out = os.fdopen(fd, "wb")
                else:
                    target.parent.mkdir(parents=True, exist_ok=True)
                    out = target.open("xb")
                with out:
                    self._get_to(rel, out)
            tmp = dest / (MANIFEST + ".tmp")
            tmp.write_bytes(raw_manifest)
            os.replace(tmp, dest / MANIFEST)
            try:
                return verify_backup(dest, cluster_id)
            except BackupError as exc:
                raise ObjectStoreError(f"{self.url}: {exc}") from exc
        except BaseException:
            _empty(dest)
            raise

    def _manifest_bytes(self, what: str) -> bytes:
        def get() -> bytes | None:
            try:
                resp = self.client.get_object(self.url.bucket, self.url.key(MANIFEST))
            except S3Error as exc:
                if exc.code == "NoSuchKey":
                    return None
                raise
            try:
                return bytes(resp.read())
            finally:
                resp.close()
                resp.release_conn()

        data = self._call(what, get)
        if data is None:
            raise ObjectStoreError(f"{self.url} holds no {MANIFEST}: not a backup, or its upload did not finish; "
                                   "use another backup")
        return data

    def delete(self) -> int:
        """Delete the backup under the prefix: the manifest first, then the rest. Returns how many objects went
        (0: nothing there). Refuses (deleting nothing) when an object under the prefix is not a backup file."""
        what = f"deleting {self.url}"
        self._require_bucket(what)
        found = self.objects()
        if not found:
            return 0
        foreign = sorted(r for r in found if not _is_backup_file(r))
        if foreign:
            raise ObjectStoreError(f"{self.url} holds {len(foreign)} object(s) that are not backup files (e.g. "
                                   f"{foreign[0]}); nothing was deleted: check the prefix")
        order = ([MANIFEST] if MANIFEST in found else []) + sorted(r for r in found if r != MANIFEST)
        for rel in order:
            key = self.url.key(rel)
            self._call(f"{what} ({rel})", functools.partial(self.client.remove_object, self.url.bucket, key))
        return len(order)


def _line(text: str, limit: int = 300) -> str:
    """A server's text as part of a one-line error."""
    return " ".join(text.split())[:limit]


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _empty(dest: Path) -> None:
    """Remove what a failed download wrote (``dest`` was new or empty)."""
    if dest.is_dir():
        for p in dest.iterdir():
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p, ignore_errors=True)
            else:
                p.unlink(missing_ok=True)


def store_for(url: str, endpoint: str | None, ca_bundle: Path | None) -> BackupStore:
    """The store of ``url`` with settings from the flags and the environment (one-line errors before any request)."""
    parsed = parse_s3_url(url)
    settings = S3Settings.from_env(endpoint, ca_bundle)
    return BackupStore(make_client(settings), parsed, settings.endpoint)
