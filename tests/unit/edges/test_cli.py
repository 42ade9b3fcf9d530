"""CLI behaviour that needs no SCM: clear errors (no traceback), argument checks, report layout."""

from __future__ import annotations

import pytest

from scm_server.cli.main import main
from scm_server.cli.output import report_text, report_to_dict
from scm_server.ports import dead_address as _dead_address
from scm_server.proto import hdds_pb2


def test_unreachable_scm_is_one_clear_line(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                                           tmp_path: object) -> None:
    monkeypatch.delenv("OZONE_CONF_DIR", raising=False)
    monkeypatch.setenv("OZONE-SITE.XML_hdds.scmclient.failover.retry.interval", "10ms")
    monkeypatch.setenv("OZONE-SITE.XML_hdds.scmclient.failover.max.retry", "2")
    monkeypatch.setenv("OZONE-SITE.XML_ozone.scm.ha.ratis.leader.election.timeout", "100ms")
    addr = _dead_address()
    with pytest.raises(SystemExit) as info:
        main(["admin", "--scm", addr, "safemode", "status"])
    assert info.value.code == 1
    err = capsys.readouterr().err
    assert f"cannot reach SCM at {addr}" in err
    assert "Traceback" not in err


def test_bad_scm_address_is_a_usage_error(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("OZONE_CONF_DIR", raising=False)
    with pytest.raises(SystemExit) as info:
        main(["admin", "--scm", "nohostport", "container", "list"])
    assert info.value.code == 2
    assert "expected host:port" in capsys.readouterr().err


def test_clusterid_without_init_rejected(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["scm", "--clusterid", "CID-1"])
    assert info.value.code == 2
    assert "--clusterid only applies to --init" in capsys.readouterr().err


def test_report_layout_and_json() -> None:
    report = hdds_pb2.ReplicationManagerReportProto(
        timestamp=1_700_000_000_000,
        stat=[
            hdds_pb2.ReplicationManagerReportProto.Counter(key="CLOSED", count=4),
            hdds_pb2.ReplicationManagerReportProto.Counter(key="UNDER_REPLICATED", count=2),
        ],
        statSample=[hdds_pb2.ReplicationManagerReportProto.Samples(key="UNDER_REPLICATED", containerIds=[3, 9])],
    )
    text = report_text(report)
    assert "Container State Summary" in text and "CLOSED: 4" in text and "OPEN: 0" in text
    assert "UNDER_REPLICATED: 2" in text and "First 2 UNDER_REPLICATED containers:\n3, 9" in text
    assert report_to_dict(report) == {
        "reportTimeStamp": 1_700_000_000_000,
        "stats": {"CLOSED": 4, "UNDER_REPLICATED": 2},
        "samples": {"UNDER_REPLICATED": [3, 9]},
    }


def test_json_uses_numbers_and_enum_names() -> None:
    from scm_server.cli.output import to_dict

    info = hdds_pb2.ContainerInfoProto(
        containerID=7, state=hdds_pb2.CLOSED, usedBytes=2**40, pipelineID=hdds_pb2.PipelineID(id="p")
    )
    assert to_dict(info) == {"containerID": 7, "state": "CLOSED", "pipelineID": {"id": "p"}, "usedBytes": 2**40}
    node = hdds_pb2.Node(nodeID=hdds_pb2.DatanodeDetailsProto(uuid="u"), nodeStates=[hdds_pb2.DEAD])
    assert to_dict(node) == {"nodeID": {"uuid": "u"}, "nodeStates": ["DEAD"]}


def test_datanode_list_json_carries_volume_counts() -> None:
    """`admin datanode list --json` shows the volume counts Ozone's `datanode list` prints (and the failed volumes
    `--nodes-with-failed-volumes` selects on)."""
    from scm_server.cli.output import node_to_dict

    node = hdds_pb2.Node(nodeID=hdds_pb2.DatanodeDetailsProto(uuid="u"), nodeStates=[hdds_pb2.HEALTHY],
                         totalVolumeCount=3, healthyVolumeCount=2, failedVolumes=["/data2"])
    d = node_to_dict(node)
    assert (d["totalVolumeCount"], d["healthyVolumeCount"], d["failedVolumes"]) == (3, 2, ["/data2"])
