"""The secret key and principal settings: Ozone's defaults, and one clear line for each bad value."""

from __future__ import annotations

from datetime import timedelta

import pytest

from scm_server.conf import OzoneConfiguration
from scm_server.conf.security import SecurityConfig
from scm_server.exceptions import ConfigError

SECURE = {"ozone.security.enabled": "true"}


def config(**values: str) -> SecurityConfig:
    conf = OzoneConfiguration()
    for key, value in {**SECURE, **values}.items():
        conf.set(key, value)
    return SecurityConfig.from_conf(conf)


def test_ozone_defaults_and_when_keys_are_on() -> None:
    c = config()
    assert (c.secret_key_algorithm, c.secret_key_rotate_duration, c.secret_key_rotate_check_duration,
            c.secret_key_expiry_duration, c.block_token_expiry) == (
        "HmacSHA256", timedelta(days=1), timedelta(minutes=10), timedelta(days=9), timedelta(days=1))
    assert (c.datanode_kerberos_principal, c.om_kerberos_principal) == ("dn/_HOST@REALM", "OM/_HOST@REALM")
    assert not c.secret_keys_enabled
    assert config(**{"hdds.block.token.enabled": "true"}).secret_keys_enabled
    assert config(**{"hdds.container.token.enabled": "true"}).secret_keys_enabled


@pytest.mark.parametrize("values, message", [
    ({"hdds.secret.key.algorithm": "HmacMD5"}, "hdds.secret.key.algorithm=HmacMD5: use one of HmacSHA1"),
    ({"hdds.block.token.enabled": "true", "hdds.secret.key.expiry.duration": "1d"},
     "hdds.secret.key.expiry.duration (1 day, 0:00:00) must be longer than hdds.secret.key.rotate.duration"),
    ({"hdds.secret.key.rotate.check.duration": "0s"}, "hdds.secret.key.rotate.check.duration: must be positive"),
    ({"hdds.datanode.kerberos.principal": "a/b/c@R"}, "hdds.datanode.kerberos.principal=a/b/c@R: not a service principal"),
])
def test_bad_values_are_one_clear_line(values: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as err:
        config(**values)
    assert message in str(err.value) and "\n" not in str(err.value)
