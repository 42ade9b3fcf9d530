"""One warning line, not an aiohttp traceback, for a connection the SCM's web server cannot parse.

Installed by ``scm_server/server/web.py`` (``make_app``) on the ``aiohttp.server`` logger. The
usual cause is a gRPC client (the admin CLI, a datanode) pointed at ``ozone.scm.http-address``
instead of a gRPC port: every attempt opens a connection that starts with the HTTP/2 preface,
and aiohttp logs each one as an ERROR with a traceback. This filter rewrites exactly those
records (the exception is an aiohttp HTTP parsing error) into one WARNING line that names the
peer and what to do; every other record passes unchanged. It never drops a record.
"""

from __future__ import annotations

import logging

from aiohttp.http_exceptions import HttpProcessingError

LOGGER_NAME = "aiohttp.server"


def _describe(exc: BaseException, peer: object) -> str:
    text = str(exc)
    if "PRI" in text or "HTTP/2" in text:
        return (
            f"web server: rejected a connection from {peer} that speaks HTTP/2 (a gRPC client pointed at the "
            "web port? gRPC clients use ozone.scm.client.grpc.port, ozone.scm.block.client.grpc.port or "
            "ozone.scm.datanode.grpc.port, not ozone.scm.http-address)"
        )
    first = " ".join(text.split())[:160]
    return f"web server: rejected a malformed HTTP request from {peer}: {first}"


class BadRequestFilter(logging.Filter):
    """Rewrites aiohttp's "Error handling request" records caused by unparsable input."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, HttpProcessingError):
            args = record.args if isinstance(record.args, tuple) else ()
            record.msg = _describe(exc, args[0] if args else "an unknown peer")
            record.args = ()
            record.exc_info = None
            record.exc_text = None
            record.levelno = logging.WARNING
            record.levelname = logging.getLevelName(logging.WARNING)
        return True


def install() -> None:
    """Add the filter to aiohttp's server logger once per process."""
    logger = logging.getLogger(LOGGER_NAME)
    if not any(isinstance(f, BadRequestFilter) for f in logger.filters):
        logger.addFilter(BadRequestFilter())
