"""The object-storage client's checks made before any request (``scm_server/client/object_store.py``): the
``s3://`` URL, the settings from flags and the standard variables, the endpoint, and a missing CA bundle -- each a
one-line :class:`ObjectStoreError`. The requests themselves run against a real radosgw in ``make s3-test``."""

from __future__ import annotations

from pathlib import Path

import pytest

from scm_server.client.object_store import ObjectStoreError, S3Settings, S3Url, make_client, parse_s3_url

KEYS = {"AWS_ACCESS_KEY_ID": "AK", "AWS_SECRET_ACCESS_KEY": "SK"}


@pytest.mark.parametrize(("text", "bucket", "prefix"), [
    ("s3://scm-backups/prod/scm/b1/", "scm-backups", "prod/scm/b1/"),
    ("s3://scm-backups/prod/scm/b1", "scm-backups", "prod/scm/b1/"),
    ("s3://a.b-c/x/", "a.b-c", "x/"),
])
def test_good_urls(text: str, bucket: str, prefix: str) -> None:
    url = parse_s3_url(text)
    assert url == S3Url(bucket, prefix)
    assert str(url) == f"s3://{bucket}/{prefix}" and url.key("manifest.json") == prefix + "manifest.json"


@pytest.mark.parametrize(("text", "words"), [
    ("/backups/b1", "is not an s3:// URL"),
    ("https://bucket/p/", "is not an s3:// URL"),
    ("s3://bucket", "names no prefix"),
    ("s3://bucket/", "names no prefix"),
    ("s3://Bucket/p/", "not a valid bucket name"),
    ("s3://ab/p/", "not a valid bucket name"),
    ("s3://a..b/p/", "not a valid bucket name"),
    ("s3://bucket/a//b/", "path segments"),
    ("s3://bucket/a/../b/", "path segments"),
])
def test_bad_urls_are_one_line_errors(text: str, words: str) -> None:
    with pytest.raises(ObjectStoreError) as exc:
        parse_s3_url(text)
    assert words in str(exc.value) and "\n" not in str(exc.value)


def test_settings_from_the_standard_variables_and_the_flags() -> None:
    s = S3Settings.from_env(None, None, {**KEYS, "AWS_ENDPOINT_URL": "http://127.0.0.1:9000"})
    assert (s.endpoint, s.access_key, s.secret_key, s.region, s.session_token, s.ca_bundle) == (
        "http://127.0.0.1:9000", "AK", "SK", "us-east-1", None, None)
    s = S3Settings.from_env("https://flag:1", Path("/ca.pem"), {
        **KEYS, "AWS_ENDPOINT_URL_S3": "http://s3-only:2", "AWS_ENDPOINT_URL": "http://any:3",
        "AWS_DEFAULT_REGION": "eu-west-1", "AWS_SESSION_TOKEN": "T", "AWS_CA_BUNDLE": "/other.pem"})
    assert (s.endpoint, s.region, s.session_token, s.ca_bundle) == ("https://flag:1", "eu-west-1", "T", Path("/ca.pem"))
    s = S3Settings.from_env(None, None, {**KEYS, "AWS_ENDPOINT_URL_S3": "http://s3-only:2",
                                         "AWS_ENDPOINT_URL": "http://any:3", "AWS_CA_BUNDLE": "/b.pem"})
    assert (s.endpoint, s.ca_bundle) == ("http://s3-only:2", Path("/b.pem"))


@pytest.mark.parametrize(("env", "words"), [
    ({"AWS_ENDPOINT_URL": "http://h:1"}, "no S3 credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"),
    ({"AWS_ENDPOINT_URL": "http://h:1", "AWS_ACCESS_KEY_ID": "AK"}, "no S3 credentials"),
    (KEYS, "no S3 endpoint: give --endpoint-url URL or set AWS_ENDPOINT_URL"),
])
def test_missing_settings_are_one_line_errors(env: dict[str, str], words: str) -> None:
    with pytest.raises(ObjectStoreError, match=words):
        S3Settings.from_env(None, None, env)


@pytest.mark.parametrize("endpoint", ["ftp://h:1", "h:9000", "http://h:1/path", "http://h:99999999"])
def test_an_endpoint_that_is_not_a_base_url_is_refused(endpoint: str) -> None:
    with pytest.raises(ObjectStoreError, match="http"):
        make_client(S3Settings(endpoint, "AK", "SK"))


def test_a_missing_ca_bundle_is_refused_before_any_request(tmp_path: Path) -> None:
    with pytest.raises(ObjectStoreError, match=r"CA bundle .* does not exist"):
        make_client(S3Settings("https://h:1", "AK", "SK", ca_bundle=tmp_path / "nope.pem"))
    assert make_client(S3Settings("http://127.0.0.1:1", "AK", "SK")) is not None
