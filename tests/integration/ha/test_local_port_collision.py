"""The local harness picks free ports and the daemon binds them later: another process can take one in
between (a busy machine; `make test-slow` failed so: "cannot listen on 127.0.0.1:20075
(ozone.scm.datanode.port) ... address already in use"). The harness starts that SCM again on a newly
picked port, a bounded number of times, and says so clearly when the last start fails too."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from scm_harness import LocalCluster

from scm_server.local.cluster import START_ATTEMPTS, PortInUseError, bind_failure
from scm_server.ports import free_port

pytestmark = pytest.mark.processes  # whole-SCM scenarios: make test-slow


def _hold(port: int) -> socket.socket:
    """Another process's listener on ``port`` (no SO_REUSEPORT: the daemon's bind must fail)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", port))
    s.listen()
    return s


class Picker:
    """free_port, recording every pick; once ``taken`` is set, every port it picks is held (listened on)
    by someone else before the daemon binds it."""

    def __init__(self) -> None:
        self.picks: list[int] = []
        self.taken = False
        self.held: list[socket.socket] = []

    def __call__(self) -> int:
        port = free_port()
        self.picks.append(port)
        if self.taken:
            self.held.append(_hold(port))
        return port


@pytest.fixture
def picker() -> Iterator[Picker]:
    p = Picker()
    yield p
    for s in p.held:
        s.close()


def test_a_port_taken_after_the_pick_is_picked_again(tmp_path: Path, picker: Picker) -> None:
    cluster = LocalCluster(tmp_path, 1, port_picker=picker)
    scm = cluster.scms[0]
    taken = scm.hadoop_ports["datanode"]  # the port of the failed run: ozone.scm.datanode.port
    assert taken in picker.picks
    cluster.write_configs()
    cluster.init()
    picker.held.append(_hold(taken))  # another process takes it between the pick and the bind
    try:
        cluster.start(0)
        cluster.wait_serving(0, timeout=120)
        assert scm.start_attempts == 2
        assert bind_failure(scm.log_path) == taken  # the first start did fail on it
        moved = scm.hadoop_ports["datanode"]
        assert moved != taken and moved == picker.picks[-1]
        assert f"<value>{moved}</value>" in (scm.conf_dir / "ozone-site.xml").read_text()
        with socket.create_connection(("127.0.0.1", moved), timeout=5):
            pass  # the SCM listens on the new port
    finally:
        cluster.stop_all()


def test_a_port_taken_on_every_attempt_is_a_clear_error(tmp_path: Path, picker: Picker) -> None:
    cluster = LocalCluster(tmp_path, 1, port_picker=picker)
    scm = cluster.scms[0]
    cluster.write_configs()
    cluster.init()
    picker.held.append(_hold(scm.hadoop_ports["datanode"]))
    picker.taken = True  # every new port is taken too
    try:
        cluster.start(0)
        with pytest.raises(PortInUseError) as err:
            cluster.wait_serving(0, timeout=180)
        message = str(err.value)
        last = picker.picks[-1]
        assert f"could not listen on 127.0.0.1:{last} (ozone.scm.datanode.port)" in message
        assert f"after {START_ATTEMPTS} start attempt(s)" in message
        assert scm.start_attempts == START_ATTEMPTS
        assert scm.proc is not None and scm.proc.poll() not in (None, 0)
    finally:
        cluster.stop_all()
