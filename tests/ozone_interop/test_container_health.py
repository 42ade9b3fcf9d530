"""The judging of tests/ozone_interop/container_health.py on the JSON and text Ozone's admin CLI prints (no
cluster): what counts as a container back to full health after a datanode is gone."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.ozone_interop.container_health import (
    full_holders,
    infos_by_id,
    report_counts,
    required_replicas,
    shortfalls,
)

EC = {"replicationType": "EC", "data": 3, "parity": 2, "codec": "RS", "ecChunkSize": 1048576}
RATIS = {"replicationType": "RATIS", "replicationFactor": "THREE", "requiredNodes": 3}
DEAD = "dn-dead"


def listed(cid: int, state: str, config: dict[str, Any]) -> dict[str, Any]:
    return {"containerID": cid, "state": state, "replicationConfig": config}


def info(*replicas: tuple[str, int, str]) -> dict[str, Any]:
    return {"replicas": [{"datanodeDetails": {"uuid": dn}, "replicaIndex": index, "state": state}
                         for dn, index, state in replicas]}


def test_required_replicas_from_the_replication_config() -> None:
    assert required_replicas(EC) == ("EC", 5)
    assert required_replicas(RATIS) == ("RATIS", 3)
    assert required_replicas({"replicationType": "RATIS", "replicationFactor": "ONE"}) == ("RATIS", 1)


def test_an_ec_container_is_healthy_only_with_every_index_on_a_live_datanode() -> None:
    five = [(f"dn{i}", i, "CLOSED") for i in range(1, 6)]
    assert shortfalls([listed(1, "CLOSED", EC)], {1: info(*five)}, set()) == []
    # index 2's holder died: the replica it still lists does not count
    lost = [(DEAD if i == 2 else f"dn{i}", i, "CLOSED") for i in range(1, 6)]
    assert shortfalls([listed(1, "CLOSED", EC)], {1: info(*lost)}, {DEAD}) == [
        "container 1 (EC): indexes [2] not on a live datanode"]
    # five replicas but index 4 twice and no index 3: still short
    doubled = [("dn1", 1, "CLOSED"), ("dn2", 2, "CLOSED"), ("dn3", 4, "CLOSED"), ("dn4", 4, "CLOSED"),
               ("dn5", 5, "CLOSED")]
    assert shortfalls([listed(1, "CLOSED", EC)], {1: info(*doubled)}, set()) == [
        "container 1 (EC): indexes [3] not on a live datanode"]
    rebuilt = [*lost, ("dn6", 2, "CLOSED")]
    assert shortfalls([listed(1, "CLOSED", EC)], {1: info(*rebuilt)}, {DEAD}) == []


def test_a_ratis_container_needs_three_live_replicas() -> None:
    two = info(("dn1", 0, "CLOSED"), ("dn2", 0, "CLOSED"), (DEAD, 0, "CLOSED"))
    assert shortfalls([listed(7, "CLOSED", RATIS)], {7: two}, {DEAD}) == ["container 7 (RATIS): 2 live replicas of 3"]
    three = info(("dn1", 0, "CLOSED"), ("dn2", 0, "CLOSED"), ("dn3", 0, "CLOSED"), (DEAD, 0, "CLOSED"))
    assert shortfalls([listed(7, "CLOSED", RATIS)], {7: three}, {DEAD}) == []


@pytest.mark.parametrize(("state", "replica_state", "fragment"), [
    ("CLOSING", "CLOSING", "not closed yet"),
    ("CLOSED", "QUASI_CLOSED", "not closed yet"),
    ("QUASI_CLOSED", "QUASI_CLOSED", "not closed yet"),
    ("CLOSED", "UNHEALTHY", "UNHEALTHY replicas"),
])
def test_closing_and_unhealthy_replicas_are_not_healthy(state: str, replica_state: str, fragment: str) -> None:
    replicas = info(("dn1", 0, replica_state), ("dn2", 0, "CLOSED"), ("dn3", 0, "CLOSED"))
    problems = shortfalls([listed(3, state, RATIS)], {3: replicas}, set())
    assert len(problems) == 1 and fragment in problems[0], problems


def test_open_containers_are_judged_by_their_dead_members_only() -> None:
    # an open container being written has fewer replicas than it will: healthy while all sit on live datanodes
    assert shortfalls([listed(4, "OPEN", RATIS)], {4: info(("dn1", 0, "OPEN"))}, set()) == []
    assert shortfalls([listed(4, "OPEN", EC)], {4: info(("dn1", 1, "OPEN"), (DEAD, 2, "OPEN"))}, {DEAD}) == [
        "container 4 (EC): OPEN with a replica on a dead datanode"]


def test_leaving_and_never_written_containers_need_nothing_and_an_unanswered_one_is_named() -> None:
    assert shortfalls([listed(5, "DELETING", RATIS), listed(6, "DELETED", EC)], {}, {DEAD}) == []
    # allocated, never written: no replica anywhere and no key
    assert shortfalls([listed(9, "CLOSING", RATIS)], {9: info()}, {DEAD}) == []
    # no replica left but keys in it: lost, not "never written"
    lost = {**listed(10, "CLOSED", RATIS), "numberOfKeys": 2}
    assert shortfalls([lost], {10: info()}, set()) == ["container 10 (RATIS): 0 live replicas of 3"]
    assert shortfalls([listed(8, "CLOSED", RATIS)], {}, set()) == ["container 8: no `container info` answer"]


def test_report_counts_reads_the_state_lines() -> None:
    text = """Container Summary Report generated at 2026-01-02T03:04:05Z
==================================================

Container State Summary
=======================
OPEN: 2
CLOSED: 3

Container Health Summary
========================
UNDER_REPLICATED: 1
MISSING: 0

First 100 UNDER_REPLICATED containers:
#7
"""
    counts = report_counts(text)
    assert counts == {"OPEN": 2, "CLOSED": 3, "UNDER_REPLICATED": 1, "MISSING": 0}


def test_container_info_of_one_id_and_of_several() -> None:
    one = {"containerInfo": {"containerID": 4, "state": "CLOSED"}, "replicas": []}
    assert infos_by_id(json.dumps(one)) == {4: one}
    two = {"containerInfo": {"containerID": 5, "state": "OPEN"}, "replicas": []}
    # Ozone 2.x prints several IDs' answers as "[" obj "," obj "]"
    assert infos_by_id("[" + json.dumps(one, indent=2) + ",\n" + json.dumps(two, indent=2) + "]") == {4: one, 5: two}


def test_full_holders_only_counts_containers_with_their_whole_set() -> None:
    containers = [listed(1, "CLOSED", EC), listed(2, "CLOSED", RATIS), listed(3, "CLOSED", RATIS),
                  listed(4, "DELETING", RATIS)]
    infos = {
        1: info(*((f"dn{i}", i, "CLOSED") for i in range(1, 6))),
        2: info(("dn1", 0, "CLOSED"), ("dn6", 0, "CLOSED"), ("dn7", 0, "CLOSED")),
        3: info(("dn2", 0, "CLOSED"), ("dn3", 0, "CLOSED")),  # short: its holders are not counted
        4: info(("dn2", 0, "CLOSED"), ("dn3", 0, "CLOSED"), ("dn4", 0, "CLOSED")),  # leaving
    }
    holders = full_holders(containers, infos)
    assert holders == {"EC": {"dn1", "dn2", "dn3", "dn4", "dn5"}, "RATIS": {"dn1", "dn6", "dn7"}}
    assert holders["EC"] & holders["RATIS"] == {"dn1"}
    # an EC container missing index 3 is not full, however many replicas it lists
    infos[1] = info(("dn1", 1, "CLOSED"), ("dn2", 2, "CLOSED"), ("dn4", 4, "CLOSED"), ("dn5", 5, "CLOSED"),
                    ("dn6", 5, "CLOSED"))
    assert "EC" not in full_holders(containers, infos)
