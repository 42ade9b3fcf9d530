"""The operator's Events through ``events.k8s.io/v1`` (``KubeClient.event``) against the emulated API server, which
checks them as that API does and shows them as core Events too: the fields a real server requires, a repeat counted
into the first Event's ``series`` instead of a new object, a changed note or an expired Event starting a new one."""

from __future__ import annotations

import datetime
from typing import Any

from ozone_scm_operator.effects.kube import (
    REPORTING_CONTROLLER,
    EventKey,
    EventSeries,
    KubeClient,
    load_configuration,
)
from tests.e2e.local.apiserver import serving

NS = "default"
T0 = datetime.datetime(2026, 11, 27, 10, 0, 0, 123456, tzinfo=datetime.UTC)
CLUSTER = {"apiVersion": "ozone-scm.io/v1alpha1", "kind": "OzoneSCMCluster",
           "metadata": {"name": "scm", "namespace": NS, "uid": "u-1", "resourceVersion": "7"}}


def _v1_events(api: Any) -> list[dict[str, Any]]:
    return api.list_objects("events.k8s.io/v1", "Event", NS)


async def test_events_are_posted_through_events_v1_and_repeats_extend_a_series() -> None:
    async with serving() as (api, url):
        kube = KubeClient(load_configuration(url), instance="ozone-scm-operator-7d9f-abcde")
        try:
            await kube.event(CLUSTER, "Normal", "CreatingPod", "creating Pod scm-0", T0, action="CreatePod")
            [ev] = _v1_events(api)
            assert ev["reportingController"] == REPORTING_CONTROLLER == "ozone-scm.io/operator"
            assert ev["reportingInstance"] == "ozone-scm-operator-7d9f-abcde"
            assert (ev["action"], ev["reason"], ev["note"], ev["type"]) == ("CreatePod", "CreatingPod",
                                                                           "creating Pod scm-0", "Normal")
            assert ev["eventTime"] == "2026-11-27T10:00:00.123456Z" and "series" not in ev
            assert ev["metadata"]["name"].startswith("scm.")  # <regarding>.<nanoseconds, hex>, as client-go names them
            assert ev["regarding"] == {"apiVersion": "ozone-scm.io/v1alpha1", "kind": "OzoneSCMCluster",
                                       "name": "scm", "namespace": NS, "uid": "u-1"}
            # the same occurrence again, twice: one object, its series counting
            for i in (1, 2):
                await kube.event(CLUSTER, "Normal", "CreatingPod", "creating Pod scm-0",
                                 T0 + datetime.timedelta(seconds=i), action="CreatePod")
            [ev] = _v1_events(api)
            assert ev["series"] == {"count": 3, "lastObservedTime": "2026-11-27T10:00:02.123456Z"}
            # as kubectl get events / describe read it (core v1)
            [core] = api.list_objects("v1", "Event", NS)
            assert (core["message"], core["involvedObject"]["uid"], core["series"]["count"]) == (
                "creating Pod scm-0", "u-1", 3)
            # another note, another action or type: a new Event each
            await kube.event(CLUSTER, "Normal", "CreatingPod", "creating Pod scm-1", T0, action="CreatePod")
            await kube.event(CLUSTER, "Warning", "CreatingPod", "creating Pod scm-0", T0, action="CreatePod")
            await kube.event(CLUSTER, "Normal", "CreatingPod", "creating Pod scm-0", T0)
            assert len(_v1_events(api)) == 4
            reconcile = [e for e in _v1_events(api) if e["action"] == "Reconcile"]
            assert len(reconcile) == 1
            # the series' Event deleted (the server's event TTL): the next repeat creates a new one
            api.call_delete("v1", "Event", ev["metadata"]["name"], NS)
            await kube.event(CLUSTER, "Normal", "CreatingPod", "creating Pod scm-0", T0, action="CreatePod")
            again = [e for e in _v1_events(api) if e["note"] == "creating Pod scm-0" and e["type"] == "Normal"
                     and e["action"] == "CreatePod"]
            assert len(again) == 1 and "series" not in again[0] and again[0]["metadata"]["name"] != \
                ev["metadata"]["name"]
            # a note beyond events.k8s.io/v1's 1 kB limit is cut, not refused
            await kube.event(CLUSTER, "Warning", "InvalidSpec", "é" * 2000, T0)
            long = [e for e in _v1_events(api) if e["reason"] == "InvalidSpec"]
            assert len(long) == 1 and len(long[0]["note"].encode()) <= 1024
            assert api.internal_errors == []
        finally:
            kube.close()


async def test_a_refused_event_is_logged_never_raised() -> None:
    async with serving() as (api, url):
        kube = KubeClient(load_configuration(url), instance="i")
        try:
            gone = {**CLUSTER, "metadata": {**CLUSTER["metadata"], "namespace": "no-such-namespace"}}
            await kube.event(gone, "Normal", "CreatingPod", "m", T0, action="CreatePod")  # 404 from the server
            assert _v1_events(api) == []
        finally:
            kube.close()


def test_a_series_finishes_after_six_quiet_minutes_and_the_cache_is_bounded() -> None:
    key = EventKey("v1", "Pod", NS, "p", "u", "A", "R", "Normal", "n")
    s = EventSeries(capacity=2)
    assert s.observe(key, 0.0) is None
    s.started(key, "p.abc", 0.0)
    series = s.observe(key, 300.0)
    assert series is not None and (series.name, series.count) == ("p.abc", 2)
    assert s.observe(key, 300.0 + 361.0) is None  # more than 6 minutes after the last occurrence
    s.started(key, "p.def", 700.0)
    for i in range(2):
        s.started(EventKey("v1", "Pod", NS, f"q{i}", "u", "A", "R", "Normal", "n"), f"q{i}", 701.0)
    assert s.observe(key, 702.0) is None  # dropped: the least recently seen beyond the capacity
