"""OzoneConfiguration sources/precedence, typed getters, typed groups and their error messages."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from scm_server.conf import (
    NodeManagerConfig,
    OzoneConfiguration,
    ReplicationManagerConfig,
    SafeModeConfig,
    SCMConfig,
    SCMConfigurations,
    SCMHAConfig,
    parse_duration,
    parse_size,
)
from scm_server.conf.groups import key_of
from scm_server.exceptions import ConfigError


def write_site(path: Path, props: dict[str, str]) -> Path:
    body = "".join(f"<property><name>{k}</name><value>{v}</value></property>" for k, v in props.items())
    path.write_text(f"<?xml version='1.0'?><configuration>{body}</configuration>")
    return path


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("30s", timedelta(seconds=30)),
        ("5m", timedelta(minutes=5)),
        ("1h", timedelta(hours=1)),
        ("100ms", timedelta(milliseconds=100)),
        ("2d", timedelta(days=2)),
        ("1500", timedelta(milliseconds=1500)),
        (" 10 s ", timedelta(seconds=10)),
        ("PT2H", timedelta(hours=2)),
        ("P1D", timedelta(days=1)),
        ("PT15M", timedelta(minutes=15)),
    ],
)
def test_parse_duration(text: str, expected: timedelta) -> None:
    assert parse_duration("k", text) == expected


@pytest.mark.parametrize("bad", ["5 minutes", "abc", "", "-3s", "5x", "P"])
def test_parse_duration_rejects_and_names_key(bad: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_duration("ozone.scm.stale.node.interval", bad)
    msg = str(err.value)
    assert "ozone.scm.stale.node.interval" in msg
    assert repr(bad) in msg
    assert "ozone.scm.stale.node.interval=30s" in msg  # an example of a valid value


@pytest.mark.parametrize(
    ("text", "expected"),
    [("5GB", 5 << 30), ("256MB", 256 << 20), ("1024", 1024), ("0.5GB", 512 << 20), ("1kb", 1024), ("2TB", 2 << 40)],
)
def test_parse_size(text: str, expected: int) -> None:
    assert parse_size("k", text) == expected


def test_parse_size_rejects() -> None:
    with pytest.raises(ConfigError, match=r"ozone.scm.container.size: invalid size '5 GiGs'.*e\.g\. ozone.scm.container.size=5GB"):
        parse_size("ozone.scm.container.size", "5 GiGs")


def test_precedence_defaults_site_env_explicit(tmp_path: Path) -> None:
    site = write_site(tmp_path / "ozone-site.xml", {"ozone.scm.block.size": "128MB", "ozone.scm.container.size": "2GB"})
    env = {"OZONE-SITE.XML_ozone.scm.container.size": "3GB", "UNRELATED": "x"}
    conf = OzoneConfiguration.load(site, env=env)
    assert conf.get_size("ozone.scm.block.size") == 128 << 20  # site beats default
    assert conf.get_size("ozone.scm.container.size") == 3 << 30  # env beats site
    assert conf.get_duration("hdds.heartbeat.interval") == timedelta(seconds=30)  # default
    conf.set("ozone.scm.container.size", "4GB")
    assert conf.get_size("ozone.scm.container.size") == 4 << 30  # explicit beats env
    assert conf.source_of("ozone.scm.block.size") == str(site)
    assert conf.source_of("hdds.heartbeat.interval") == "default"


def test_conf_dir_from_environment(tmp_path: Path) -> None:
    write_site(tmp_path / "ozone-site.xml", {"ozone.metadata.dirs": "/data/meta"})
    conf = OzoneConfiguration.load(env={"OZONE_CONF_DIR": str(tmp_path)})
    assert conf["ozone.metadata.dirs"] == "/data/meta"
    assert OzoneConfiguration.load(tmp_path, env={})["ozone.metadata.dirs"] == "/data/meta"


def test_malformed_site_xml_is_a_config_error(tmp_path: Path) -> None:
    bad = tmp_path / "ozone-site.xml"
    bad.write_text("<configuration><property><name>x</name>")
    with pytest.raises(ConfigError, match="not valid XML"):
        OzoneConfiguration.load(bad, env={})
    with pytest.raises(ConfigError, match="does not exist"):
        OzoneConfiguration.load(tmp_path / "missing.xml", env={})
    nameless = write_site(tmp_path / "n.xml", {})
    nameless.write_text("<configuration><property><value>1</value></property></configuration>")
    with pytest.raises(ConfigError, match="has no <name>"):
        OzoneConfiguration.load(nameless, env={})


def test_site_xml_round_trip(tmp_path: Path) -> None:
    conf = OzoneConfiguration({"ozone.metadata.dirs": "/m", "ozone.scm.ratis.port.svc.scm1": "9000"})
    path = tmp_path / "ozone-site.xml"
    path.write_text(conf.to_site_xml())
    again = OzoneConfiguration.load(path, env={})
    assert again["ozone.scm.ratis.port.svc.scm1"] == "9000"
    assert again["ozone.metadata.dirs"] == "/m"


def test_typed_groups_defaults_match_ozone() -> None:
    confs = SCMConfigurations.from_conf(OzoneConfiguration({"ozone.metadata.dirs": "/m"}))
    assert confs.scm.container_size == 5 << 30
    assert confs.scm.block_size == 256 << 20
    assert confs.scm.sequence_id_batch_size == 1000
    assert confs.safemode.threshold_pct == 0.99
    assert confs.safemode.wait_time_after_exit == timedelta(minutes=5)
    assert confs.node.stale_node_interval == timedelta(minutes=5)
    assert confs.node.dead_node_interval == timedelta(minutes=10)
    assert confs.node.heartbeat_thread_interval == timedelta(seconds=3)
    assert confs.pipeline.datanode_pipeline_limit == 2
    assert confs.replication.interval == timedelta(seconds=300)
    assert confs.replication.datanode_replication_limit == 20
    assert confs.replication.datanode_delete_limit == 40
    assert confs.scm.scm_db_dir == Path("/m")
    assert not confs.ha.is_ha_configured
    assert key_of(ReplicationManagerConfig, "interval") == "hdds.scm.replication.thread.interval"


def test_env_override_reaches_typed_group() -> None:
    conf = OzoneConfiguration.load(
        env={"OZONE-SITE.XML_ozone.metadata.dirs": "/m", "OZONE-SITE.XML_hdds.scm.replication.thread.interval": "10s"}
    )
    assert ReplicationManagerConfig.from_conf(conf).interval == timedelta(seconds=10)
    assert SCMConfig.from_conf(conf).scm_db_dir == Path("/m")


def test_missing_metadata_dirs_is_named() -> None:
    with pytest.raises(ConfigError, match=r"ozone.metadata.dirs is required.*e\.g\. ozone.metadata.dirs="):
        SCMConfig.from_conf(OzoneConfiguration())


@pytest.mark.parametrize(
    ("key", "value", "group", "fragment"),
    [
        ("hdds.scm.safemode.threshold.pct", "1.5", SafeModeConfig, "between 0 and 1"),
        ("hdds.scm.safemode.threshold.pct", "abc", SafeModeConfig, "invalid number 'abc'"),
        ("hdds.scm.safemode.enabled", "maybe", SafeModeConfig, "invalid boolean 'maybe'"),
        ("hdds.scm.replication.datanode.replication.limit", "0", ReplicationManagerConfig, "must be positive"),
        ("hdds.scm.replication.datanode.replication.limit", "2.5", ReplicationManagerConfig, "invalid integer"),
        ("ozone.scm.dead.node.interval", "1m", NodeManagerConfig, "must be longer than"),
        ("ozone.scm.stale.node.interval", "10s", NodeManagerConfig, "must not be shorter than"),
        ("ozone.scm.datanode.admin.monitor.interval", "0s", NodeManagerConfig, "must be positive"),
        ("ozone.scm.datanode.admin.monitor.interval", "often", NodeManagerConfig, "ozone.scm.datanode.admin"),
    ],
)
def test_bad_values_name_the_key(key: str, value: str, group: type, fragment: str) -> None:
    conf = OzoneConfiguration({"ozone.metadata.dirs": "/m", key: value})
    with pytest.raises(ConfigError) as err:
        group.from_conf(conf)  # type: ignore[attr-defined]
    assert fragment in str(err.value)
    assert key.split(".")[-1] in str(err.value) or "interval" in str(err.value)


@pytest.mark.parametrize(("value", "expected"), [
    (None, timedelta(seconds=30)),  # Ozone's OZONE_SCM_DATANODE_ADMIN_MONITOR_INTERVAL_DEFAULT
    ("5s", timedelta(seconds=5)),
    ("2m", timedelta(minutes=2)),
    ("1500", timedelta(milliseconds=1500)),  # a bare number is milliseconds, as Ozone's getTimeDuration reads it
])
def test_admin_monitor_interval_is_ozones_key(value: str | None, expected: timedelta) -> None:
    props = {"ozone.metadata.dirs": "/m"} | ({} if value is None else {"ozone.scm.datanode.admin.monitor.interval": value})
    assert NodeManagerConfig.from_conf(OzoneConfiguration(props)).admin_monitor_interval == expected


def test_block_larger_than_container_rejected() -> None:
    conf = OzoneConfiguration({"ozone.metadata.dirs": "/m", "ozone.scm.block.size": "2GB", "ozone.scm.container.size": "1GB"})
    with pytest.raises(ConfigError, match=r"ozone\.scm\.block\.size"):
        SCMConfig.from_conf(conf)


def ha_conf(**extra: str) -> OzoneConfiguration:
    values = {
        "ozone.metadata.dirs": "/m",
        "ozone.scm.service.ids": "scmservice",
        "ozone.scm.nodes.scmservice": "scm1,scm2,scm3",
        "ozone.scm.address.scmservice.scm1": "host1",
        "ozone.scm.address.scmservice.scm2": "host2",
        "ozone.scm.address.scmservice.scm3": "host3",
        "ozone.scm.ratis.port.scmservice.scm2": "19894",
        "ozone.scm.client.grpc.port.scmservice.scm3": "29860",
        "ozone.scm.client.port.scmservice.scm3": "39860",  # Ozone's key: the Hadoop RPC port, not these nodes' gRPC
        "ozone.scm.http-address.scmservice.scm3": "0.0.0.0:19876",
        "ozone.scm.node.id": "scm2",
        "ozone.scm.primordial.node.id": "scm1",
    }
    values.update(extra)
    return OzoneConfiguration(values)


def test_ha_config_with_per_node_suffix_overrides() -> None:
    ha = SCMHAConfig.from_conf(ha_conf())
    assert ha.service_id == "scmservice"
    assert [n.node_id for n in ha.nodes] == ["scm1", "scm2", "scm3"]
    assert ha.node("scm1").ratis_address == "host1:9894"
    assert ha.node("scm2").ratis_port == 19894
    assert ha.node("scm3").client_address == "host3:29860"  # the gRPC client port
    assert ha.node("scm1").client_address == "host1:19860"  # its default
    assert ha.node("scm3").http_address == "0.0.0.0:19876"
    assert ha.local_node is not None and ha.local_node.node_id == "scm2"
    assert [p.node_id for p in ha.peers()] == ["scm1", "scm3"]
    assert ha.is_primordial("scm1") and not ha.is_primordial()
    assert ha.is_primordial(node_id="x", hostname="scm1")
    assert not ha.skip_bootstrap_validation
    conf = ha_conf()
    assert conf.get_for_node("ozone.scm.ratis.port", "scmservice", "scm2") == "19894"
    assert conf.get_for_node("ozone.scm.ratis.port", "scmservice", "scm1") == "9894"


@pytest.mark.parametrize(
    ("extra", "fragment"),
    [
        ({"ozone.scm.nodes.scmservice": ""}, "ozone.scm.nodes.scmservice is not set"),
        ({"ozone.scm.address.scmservice.scm3": ""}, "ozone.scm.address.scmservice.scm3 is not set"),
        ({"ozone.scm.node.id": "scm9"}, "ozone.scm.node.id=scm9 is not one of"),
        ({"ozone.scm.primordial.node.id": "nothere"}, "ozone.scm.primordial.node.id=nothere"),
        ({"ozone.scm.service.ids": "a,b"}, "ozone.scm.default.service.id is not set"),
        ({"ozone.scm.ratis.port.scmservice.scm1": "port"}, "ozone.scm.ratis.port.scmservice.scm1"),
    ],
)
def test_ha_config_errors(extra: dict[str, str], fragment: str) -> None:
    with pytest.raises(ConfigError) as err:
        SCMHAConfig.from_conf(ha_conf(**extra))
    assert fragment in str(err.value)


def test_service_id_typo_hint() -> None:
    # HDDS-13886: ozone.scm.service.id (singular) gave a generic error in Ozone.
    conf = OzoneConfiguration({"ozone.metadata.dirs": "/m", "ozone.scm.service.id": "svc"})
    with pytest.raises(ConfigError, match=r"ozone.scm.service.ids \(plural\)"):
        SCMHAConfig.from_conf(conf)
