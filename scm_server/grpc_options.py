"""gRPC channel and server options for every SCM endpoint except Raft's own peer transport.

Who uses it: the client (``scm_server.client``: admin/block client, datanode client, HA admin
client), the inter-SCM calls made inside an SCM (``scm_server.ha``) and the daemon's servers
(``scm_server.server``). Raft's transport keeps its own options (it imports nothing above it) and
follows the same rules. Pure data, no I/O.

What the options are for:

* **A frozen peer is noticed in about a second.** A SIGSTOPped or paused process keeps its TCP
  connections open, so without help a call waits for its whole deadline (15 minutes by Ozone's
  ``hdds.scmclient.rpc.timeout``). While a call is in flight the channel sends an HTTP/2 PING every
  ``liveness / 2`` seconds and drops the connection (UNAVAILABLE, "ping timeout") when one is not
  answered within ``liveness`` seconds. PINGs are answered by gRPC's own threads, so a server that
  is merely busy still answers and its slow call is waited for; only a process that cannot answer
  at all is given up on. ``liveness`` is derived from the Raft election timeout by the caller:
  the followers give up on a silent leader on the same time scale.
* **A peer that comes back on a new address is found again at once.** Channels are created from
  unresolved ``host:port`` names; gRPC re-resolves the name when a connection fails, but its DNS
  resolver waits at least 30 s between resolutions by default, which is what kept datanodes away
  from a restarted SCM for about 20 s. ``grpc.dns_min_time_between_resolutions_ms`` lowers that,
  and the reconnect backoff stays between 100 ms and 1 s.
* **Servers accept those PINGs.** By default a gRPC server answers a client that pings more often
  than every 5 minutes with GOAWAY "too_many_pings"; our servers allow it.
"""

from __future__ import annotations

from typing import Any

MAX_MESSAGE_BYTES = 256 * 1024 * 1024
DEFAULT_LIVENESS_S = 1.0
DNS_MIN_RERESOLVE_MS = 500
RECONNECT_BACKOFF_MIN_MS = 100
RECONNECT_BACKOFF_MAX_MS = 1000

ChannelOptions = list[tuple[str, Any]]


def liveness_from_election_timeout(election_timeout_s: float) -> float:
    """How long a connection may stay silent (unanswered PING) before the peer counts as gone.

    One election timeout, clamped to [0.5 s, 10 s]: shorter would give up on a loaded but healthy
    peer; longer than 10 s would defeat the purpose with Ozone's 5 s election timeout.
    """
    return min(10.0, max(0.5, election_timeout_s))


def channel_options(
    liveness_s: float = DEFAULT_LIVENESS_S, *, max_message_bytes: int = MAX_MESSAGE_BYTES
) -> ChannelOptions:
    """Options for a client channel (see the module docstring)."""
    liveness_ms = int(liveness_s * 1000)
    ping_every_ms = max(100, liveness_ms // 2)
    return [
        ("grpc.max_receive_message_length", max_message_bytes),
        ("grpc.max_send_message_length", max_message_bytes),
        ("grpc.enable_retries", 0),
        # reconnect and re-resolve quickly (a restarted Pod has a new IP)
        ("grpc.initial_reconnect_backoff_ms", RECONNECT_BACKOFF_MIN_MS),
        ("grpc.min_reconnect_backoff_ms", RECONNECT_BACKOFF_MIN_MS),
        ("grpc.max_reconnect_backoff_ms", RECONNECT_BACKOFF_MAX_MS),
        ("grpc.dns_min_time_between_resolutions_ms", DNS_MIN_RERESOLVE_MS),
        # liveness of the peer while calls are in flight (a frozen process answers no PING)
        ("grpc.keepalive_time_ms", ping_every_ms),
        ("grpc.keepalive_timeout_ms", liveness_ms),
        ("grpc.http2.ping_timeout_ms", liveness_ms),
        ("grpc.keepalive_permit_without_calls", 0),
        ("grpc.http2.max_pings_without_data", 0),
        ("grpc.http2.min_time_between_pings_ms", ping_every_ms),
    ]


def server_options(*, max_message_bytes: int = MAX_MESSAGE_BYTES) -> ChannelOptions:
    """Options for our gRPC servers: accept the clients' liveness PINGs, and never share a port. gRPC sets
    SO_REUSEPORT by default, so a second process on the same host and port (a second SCM given the same
    ports, another program) would bind too and take a share of the connections; without it the bind fails
    and the daemon says which port is taken (Raft's transport does the same)."""
    return [
        ("grpc.max_receive_message_length", max_message_bytes),
        ("grpc.max_send_message_length", max_message_bytes),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.min_ping_interval_without_data_ms", 100),
        ("grpc.http2.max_ping_strikes", 0),
        ("grpc.so_reuseport", 0),
    ]
