"""A relay between Prometheus and Apache Ozone's own SCM's ``/prom`` page that escapes the line breaks and quotes
inside label values, so that Prometheus can scrape Ozone's side of the dashboard comparison.

Ozone 2.2.0's SCM renders the ``RatisEvents`` tag of its ``SCMMetrics`` source as a label whose value holds the
Ratis events of the ring, one per line, with the line breaks and quotes raw. Prometheus's text parser refuses the whole page
(``expected label name, got "INVALID"``; ``promtool check metrics``: "label value ... contains unescaped
new-line"), so no panel of Ozone's own dashboards finds a series on Ozone's own SCM. The text format allows a line
break or a quote in a label value only escaped (``\\n``, ``\\"``): :func:`escape_label_values` writes them so, and
changes nothing else (comments, names, values and already-escaped text stay byte for byte). Our SCM's page is
scraped as it is.
"""

from __future__ import annotations

import re
import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# What may follow the quote that ends a label value: the next label, or the end of the label set.
_VALUE_END = re.compile(r',[a-zA-Z_][a-zA-Z0-9_]*="|,?\}')


def escape_label_values(text: str) -> tuple[str, int]:
    """``text`` (Prometheus text format) with the raw line breaks and quotes inside label values escaped (``\\n``,
    ``\\"``); returns it and how many characters were escaped. A quote ends a value only where the next label or
    the end of the label set follows it. Comment lines (``# HELP``, ``# TYPE``) are copied as they are."""
    out: list[str] = []
    escaped = 0
    in_value = False  # inside a quoted label value
    at_line_start = True
    in_comment = False
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if at_line_start and not in_value:
            in_comment = c == "#"
        at_line_start = False
        if in_comment:
            out.append(c)
            if c == "\n":
                at_line_start, in_comment = True, False
        elif in_value:
            if c == "\\" and i + 1 < n and text[i + 1] in '\\"n':  # an escape the format knows: kept
                out.append(text[i:i + 2])
                i += 2
                continue
            if c == "\\":  # a backslash that starts no escape
                out.append("\\\\")
                escaped += 1
            elif c == "\n":
                out.append("\\n")
                escaped += 1
            elif c == '"' and not _VALUE_END.match(text, i + 1):
                out.append('\\"')
                escaped += 1
            else:
                out.append(c)
                in_value = c != '"'
        else:
            out.append(c)
            if c == '"':
                in_value = True
            elif c == "\n":
                at_line_start = True
        i += 1
    return "".join(out), escaped


class RepairRelay:
    """An HTTP server on ``127.0.0.1`` (a port of its own) answering ``GET /prom`` with ``upstream``'s page passed
    through :func:`escape_label_values`; counts the pages relayed and the line breaks escaped."""

    def __init__(self, upstream: str, timeout: float = 30) -> None:
        self.upstream = upstream
        self.pages = 0
        self.escaped = 0
        self._lock = threading.Lock()
        relay = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                try:
                    with urllib.request.urlopen(relay.upstream, timeout=timeout) as resp:
                        body, escaped = escape_label_values(resp.read().decode())
                        ctype = resp.headers.get("Content-Type", "text/plain; version=0.0.4")
                except OSError as exc:
                    self.send_error(502, f"upstream {relay.upstream}: {exc}")
                    return
                with relay._lock:
                    relay.pages += 1
                    relay.escaped += escaped
                data = body.encode()
                self.send_response(200)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, name=f"prom-relay-{self.port}",
                                        daemon=True)

    def __enter__(self) -> RepairRelay:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)
