"""Tables never cut a value; the web server's bad-request log is one line; retry notices are one line.

Deterministic counterparts of ``tests/integration/test_actionable_errors.py`` (which runs the real
CLI on a pseudo-terminal and a real SCM): consoles of a fixed width, a log record built by hand.
"""

from __future__ import annotations

import io
import logging

from aiohttp.http_exceptions import BadHttpMessage
from rich.console import Console
from rich.table import Table

from scm_server.cli.feedback import RetryStatus, unavailable_hint
from scm_server.cli.output import print_table, table_lines
from scm_server.client.config import SCMClientConfig
from scm_server.server.web_errors import BadRequestFilter

UUID = "22f04a4c-93e2-4b5e-9d41-7a1c5e0b9f31"


def pipelines() -> Table:
    table = Table(title="1 pipeline(s)")
    for col in ("id", "state", "replication", "leader", "members"):
        table.add_column(col)
    table.add_row(UUID, "PIPELINE_OPEN", "RATIS/THREE", UUID,
                  "sim-dn-1/rack1, sim-dn-2/rack2, [bold]sim-dn-3[/]/rack1")
    return table


def test_a_narrow_terminal_gets_the_plain_form_with_whole_values() -> None:
    out = Console(file=io.StringIO(), width=80, force_terminal=True, color_system=None)
    print_table(pipelines(), out)
    text = out.file.getvalue()  # type: ignore[attr-defined]
    assert "…" not in text and "┃" not in text
    assert text.count(UUID) == 2 and "sim-dn-1/rack1, sim-dn-2/rack2, sim-dn-3/rack1" in text


def test_a_wide_terminal_gets_the_bordered_table() -> None:
    out = Console(file=io.StringIO(), width=200, force_terminal=True, color_system=None)
    print_table(pipelines(), out)
    text = out.file.getvalue()  # type: ignore[attr-defined]
    assert "┃" in text and text.count(UUID) == 2


def test_piped_output_is_plain_and_aligned() -> None:
    out = Console(file=io.StringIO(), width=80, force_terminal=False)
    print_table(pipelines(), out)
    lines = out.file.getvalue().splitlines()  # type: ignore[attr-defined]
    assert lines == table_lines(pipelines())
    assert lines[0] == "1 pipeline(s)"
    assert lines[1].split() == ["id", "state", "replication", "leader", "members"]
    assert lines[2].index("PIPELINE_OPEN") == lines[1].index("state")


def test_bad_request_records_become_one_warning() -> None:
    record = logging.LogRecord("aiohttp.server", logging.ERROR, __file__, 1, "Error handling request from %s",
                               ("127.0.0.1",), None)
    try:
        raise BadHttpMessage("Pause on PRI/Upgrade:\n\n    b'\\x00\\x00'\n      ^")
    except BadHttpMessage as exc:
        record.exc_info = (type(exc), exc, exc.__traceback__)
    assert BadRequestFilter().filter(record)
    assert record.levelno == logging.WARNING and record.exc_info is None
    message = record.getMessage()
    assert "\n" not in message and "from 127.0.0.1 that speaks HTTP/2" in message
    other = logging.LogRecord("aiohttp.server", logging.ERROR, __file__, 1, "Unhandled exception", (), None)
    assert BadRequestFilter().filter(other) and other.levelno == logging.ERROR


def test_retry_notices_piped_are_one_line() -> None:
    out = Console(file=io.StringIO(), width=80, force_terminal=False)
    status = RetryStatus(SCMClientConfig(max_retries=15, retry_interval=2.0), out)
    for attempt in range(1, 16):
        status.notice("10.0.0.1:9860", "unreachable", attempt)
    status.stop()
    lines = out.file.getvalue().splitlines()  # type: ignore[attr-defined]
    assert lines == ["SCM at 10.0.0.1:9860 unreachable; retrying up to 15 times, every 2s "
                     "(hdds.scmclient.failover.max.retry, hdds.scmclient.failover.retry.interval)"]
    assert "web port" in unavailable_hint("Trying to connect an http1.x server (HTTP status 400)")
    assert unavailable_hint("Connection refused") == ""
