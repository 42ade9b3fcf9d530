"""FailoverPolicy (the pure core of SCMClient's failover): frozen leaders, hints, rounds, budget."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from scm_server.client.config import SCMClientConfig
from scm_server.client.failover import FailoverPolicy

A, B, C = "a:1", "b:1", "c:1"


def policy(addresses: list[str] | None = None, stale_hint_for: float | None = None, **kw: float) -> FailoverPolicy:
    args = {"max_retries": 15, "retry_interval": 0.1, "min_window": 4.0, "suspect_for": 2.0} | kw
    return FailoverPolicy(list(addresses or [A, B, C]), int(args["max_retries"]), args["retry_interval"],
                          args["min_window"], args["suspect_for"], stale_hint_for=stale_hint_for)


def test_frozen_leader_is_not_revisited_through_the_followers_hints() -> None:
    p = policy()
    assert p.begin_call(0.0) == A
    assert p.on_unreachable(A, 1.0) == 0.0  # A froze: liveness timeout
    assert p.address == B
    # B and C still believe A leads (no election yet): their hint is not followed
    assert p.on_not_leader(B, A, 1.01) == 0.0
    assert p.address == C
    assert p.on_not_leader(C, A, 1.02) == 0.1  # every usable SCM tried: pause one retry interval
    assert p.address == B  # and ask the followers again, not the frozen SCM
    # B won the election meanwhile
    p.on_success(B)
    assert p.address == B and not p.exhausted(2.0)
    # the next call starts at B; A stays a suspect until its suspicion expires
    assert p.begin_call(2.5) == B
    assert p.is_suspect(A, 2.9) and not p.is_suspect(A, 3.0)


def _frozen_a_then_c_leads_then_c_is_killed(p: FailoverPolicy) -> None:
    p.begin_call(0.0)
    assert p.on_unreachable(A, 1.0) == 0.0  # A froze (liveness timeout): a suspect until 3.0
    assert p.on_not_leader(B, A, 1.2) == 0.0  # B still names A: too soon to believe, not followed
    assert p.address == C
    p.on_success(C)  # C won the election; A resumes and follows it
    assert p.begin_call(2.0) == C
    assert p.on_unreachable(C, 2.1) == 0.0  # C is killed; A, still a suspect, is skipped
    assert p.address == B


def test_a_suspect_named_an_election_timeout_later_won_an_election_and_is_followed() -> None:
    """The followers had time to elect: they name A because A won (after C was killed), so the
    client goes to A at once instead of waiting until A's suspicion ends."""
    p = policy(stale_hint_for=1.0)
    _frozen_a_then_c_leads_then_c_is_killed(p)
    assert p.on_not_leader(B, A, 2.2) == 0.0
    assert p.address == A


def test_without_the_stale_hint_bound_a_suspect_is_never_followed() -> None:
    p = policy()  # stale_hint_for=None: hints naming a suspect are ignored while the suspicion lasts
    _frozen_a_then_c_leads_then_c_is_killed(p)
    assert p.on_not_leader(B, A, 2.2) == 0.1  # every usable SCM tried: pause
    assert p.address == B


def test_hint_to_a_healthy_leader_is_followed_at_once() -> None:
    p = policy()
    p.begin_call(0.0)
    assert p.on_not_leader(A, C, 0.0) == 0.0
    assert p.address == C
    new = "d:1"
    assert p.on_not_leader(C, new, 0.0) == 0.0  # a leader not in the list is added
    assert p.address == new and p.addresses == [A, B, C, new]


def test_two_followers_hinting_each_other_do_not_spin_without_pause() -> None:
    p = policy([A, B])
    p.begin_call(0.0)
    assert p.on_not_leader(A, B, 0.0) == 0.0
    assert p.on_not_leader(B, A, 0.0) == 0.1  # A was tried in this round: pause


def test_a_new_call_avoids_a_suspect_current_address() -> None:
    p = policy()
    p.begin_call(0.0)
    p.on_unreachable(A, 0.0)
    p.current = 0  # as if a hint had moved us back
    assert p.begin_call(0.5) == B


def test_single_address_keeps_retrying_it() -> None:
    p = policy([A])
    p.begin_call(0.0)
    assert p.on_unreachable(A, 0.0) == 0.1
    assert p.address == A


def test_budget_needs_both_attempts_and_two_elections() -> None:
    p = policy(max_retries=2, min_window=4.0)
    p.begin_call(0.0)
    for t in (0.0, 0.1, 0.2, 0.3):
        p.on_unreachable(p.address, t)
    assert p.attempts == 4
    assert not p.exhausted(3.9)
    assert p.exhausted(4.0)


def test_window_derived_from_the_election_timeout() -> None:
    # the local cluster's settings: 15 attempts x 200 ms does not cover two elections by itself
    local = SCMClientConfig.from_getter({
        "hdds.scmclient.failover.max.retry": "15",
        "hdds.scmclient.failover.retry.interval": "200ms",
    }.get)
    assert local.min_failover_window == 4.0  # 2 elections of up to 2 x 1 s
    ozone = SCMClientConfig.from_getter({"ozone.scm.ha.ratis.leader.election.timeout": "5s"}.get)
    assert ozone.min_failover_window == 20.0 and ozone.liveness == 5.0


@settings(max_examples=300, deadline=None)
@given(
    n=st.integers(1, 4),
    events=st.lists(
        st.tuples(st.sampled_from(["unreachable", "not_leader", "not_leader_hint"]), st.integers(0, 4),
                  st.floats(0.0, 0.5)),
        max_size=40,
    ),
)
def test_rounds_and_suspects_invariants(n: int, events: list[tuple[str, int, float]]) -> None:
    """A pause comes only after every usable SCM was tried since the last pause; the address to try
    is never a suspect while a non-suspect exists; give-up needs attempts > max and the window."""
    addresses = [f"s{i}:1" for i in range(n)]
    p = policy(addresses, max_retries=5, min_window=3.0, suspect_for=1.0)
    now = 0.0
    p.begin_call(now)
    tried: set[str] = set()
    for kind, hint_index, dt in events:
        now += dt
        address = p.address
        tried.add(address)
        if kind == "unreachable":
            pause = p.on_unreachable(address, now)
        else:
            hint = addresses[hint_index % n] if kind == "not_leader_hint" else None
            pause = p.on_not_leader(address, hint, now)
        usable = [a for a in addresses if not p.is_suspect(a, now)]
        if pause > 0:
            assert set(usable) <= tried, "paused before every usable SCM was tried"
            tried = set()
        if usable:
            assert not p.is_suspect(p.address, now), "picked a suspect although others were usable"
        if p.exhausted(now):
            assert p.attempts > 5 and p.first_failure is not None and now - p.first_failure >= 3.0


def _budget(config: SCMClientConfig, scms: int = 3) -> float:
    """Seconds a client keeps failing over when no SCM answers (attempts + window, no deadline)."""
    p = FailoverPolicy([f"s{i}:1" for i in range(scms)], config.max_retries, config.retry_interval,
                       config.min_failover_window, config.suspect_for)
    now = 0.0
    p.begin_call(now)
    while not p.exhausted(now):
        now += p.on_unreachable(p.address, now) + 0.001  # each attempt costs a little
    return now


def test_every_shipped_configuration_covers_two_election_timeouts() -> None:
    """Issue 11, item 10: the retry budget outlasts two (randomised, so 2 x 2T) elections in every
    configuration the project ships: Ozone's defaults (image), the local clusters, the CRD example."""
    from pathlib import Path

    import yaml

    from scm_server.conf.ozone_configuration import DEFAULTS
    from scm_server.local.cluster import FAST_SETTINGS
    from scm_server.local.quorum import HA_SETTINGS

    root = Path(__file__).resolve().parents[3]
    shipped: dict[str, dict[str, str]] = {
        "defaults (image)": dict(DEFAULTS),
        "local cluster (1 SCM)": {**DEFAULTS, **FAST_SETTINGS},
        "local quorum (make run, local up)": {**DEFAULTS, **FAST_SETTINGS, **HA_SETTINGS},
    }
    for example in sorted((root / "crds" / "examples").glob("*.yaml")):
        for doc in yaml.safe_load_all(example.read_text()):
            site = ((doc or {}).get("spec") or {}).get("ozoneSite") or {}
            if isinstance(site, dict) and site:
                shipped[f"CRD example {example.name}"] = {**DEFAULTS, **{k: str(v) for k, v in site.items()}}
    assert any(name.startswith("CRD example") for name in shipped), "no CRD example with ozoneSite found"
    for name, values in shipped.items():
        config = SCMClientConfig.from_getter(values.get)
        two_elections = 2 * 2 * config.election_timeout
        assert _budget(config) >= two_elections, f"{name}: budget {_budget(config):.2f}s < {two_elections}s"
    # without the window, the local cluster's 15 attempts x 200 ms over 3 SCMs would not have covered it
    local = SCMClientConfig.from_getter({**DEFAULTS, **FAST_SETTINGS}.get)
    assert (local.max_retries // 3) * local.retry_interval < 2 * 2 * local.election_timeout
