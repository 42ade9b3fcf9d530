"""``ozone-scm-operator``'s leader-election options and test failpoint, as parsed (nothing is started: a bad value is
refused with one line naming the option before any connection is made)."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from ozone_scm_operator.main import _failpoint, main


@pytest.mark.parametrize(("args", "message"), [
    (["--leader-elect-renew-deadline", "20"], "--leader-elect-renew-deadline 20.0: must be less than the lease "
                                              "duration (15s)"),
    (["--leader-elect-retry-period", "9"], "must exceed 1.2 x the retry period (9.0s)"),
    (["--leader-elect-lease-duration", "0", "--leader-elect-renew-deadline", "0.5",
      "--leader-elect-retry-period", "0.1"], "--leader-elect-lease-duration 0: must be a whole number of seconds"),
])
def test_bad_leader_election_timing_is_refused_in_one_line(args: list[str], message: str) -> None:
    result = CliRunner().invoke(main, ["--server", "http://127.0.0.1:1", *args])
    assert result.exit_code == 2 and message in result.output, result.output
    assert len([line for line in result.output.splitlines() if line.startswith("Error:")]) == 1


def test_failpoints() -> None:
    assert _failpoint("") is None
    assert _failpoint("CreatePod:scm-1") == ("CreatePod", "scm-1", "exit")
    assert _failpoint("DeletePVC:scm-2-data:pause") == ("DeletePVC", "scm-2-data", "pause")
    assert _failpoint("DeletePod:scm-1:gate=/tmp/a:b/go") == ("DeletePod", "scm-1", "gate=/tmp/a:b/go")
    for bad in ("CreatePod", "CreatePod:", "a:b:sometimes", "a:b:c:d", "a:b:gate=", "a:b:gate=relative"):
        with pytest.raises(click.BadParameter, match="expected <ActionKind>:<target>"):
            _failpoint(bad)
