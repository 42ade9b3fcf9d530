"""`local up|status|down` (scm_server.cli.local_quorum): a 3-SCM quorum plus a datanode simulator
process started in the background, inspected from its recorded state, and stopped."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from scm_server.cli import local_quorum as local_cluster


@pytest.mark.timeout(240)
def test_up_status_down(tmp_path: Path) -> None:
    data = tmp_path / "run-data"
    try:
        state_file = local_cluster.up(3, 3, data)
        assert state_file.exists()
        st = local_cluster.status(data)
        assert all(st["alive"].values())
        roles = st["roles"]
        assert not isinstance(roles, str), roles
        assert sorted(p.role for p in roles.peers) == ["FOLLOWER", "FOLLOWER", "LEADER"]
        conf = st["state"]["scms"][0]["conf_dir"]
        out = subprocess.run(
            [sys.executable, "-m", "scm_server.cli.main", "--conf", conf, "admin", "scm", "roles"],
            capture_output=True, text=True, timeout=60,
        )
        assert out.returncode == 0, out.stderr
        assert out.stdout.count(":FOLLOWER:") == 2 and out.stdout.count(":LEADER:") == 1
        with pytest.raises(RuntimeError, match="local down"):
            local_cluster.up(3, 3, data)
    finally:
        stopped = local_cluster.down(data) if (data / local_cluster.STATE_FILE).exists() else []
    assert set(stopped) == {"scm1", "scm2", "scm3", "datanodes"}
    assert not any(local_cluster.status(data)["alive"].values())
