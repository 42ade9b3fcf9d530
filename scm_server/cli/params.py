"""Click parameter types for the CLI's numbers, sizes and IDs, so click names the bad option.

Used by the command modules (``admin.py``, ``freon.py``, ``datanode_sim_cmd.py``, ``local.py``,
``main.py``). Pure: parsing only. A value outside what the request can carry is refused by click
as ``Invalid value for '--count': ...`` before any client is built.
"""

from __future__ import annotations

from typing import Any

import click

from scm_server.client.arguments import INT64_MAX, UINT32_MAX
from scm_server.conf import parse_size
from scm_server.exceptions import ConfigError

CONTAINER_ID = click.IntRange(1, INT64_MAX)
CONTAINER_START = click.IntRange(0, INT64_MAX)
COUNT = click.IntRange(1, UINT32_MAX)
POSITIVE = click.IntRange(min=1)
NON_NEGATIVE = click.IntRange(min=0)
SECONDS = click.FloatRange(min=0)


class Size(click.ParamType):
    """A storage size: ``5GB``, ``256MB``, ``4096`` (bytes)."""

    name = "size"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value
        try:
            size = parse_size(param.opts[0] if param is not None else "size", str(value))
        except ConfigError as exc:
            self.fail(str(exc).split(": ", 1)[-1], param, ctx)
        if size <= 0:
            self.fail(f"{value!r} must be more than 0 bytes (e.g. 5GB)", param, ctx)
        return size


SIZE = Size()


class Setting(click.ParamType):
    """A configuration key and its value, ``KEY=VALUE`` (e.g. ``hadoop.security.authentication=kerberos``)."""

    name = "KEY=VALUE"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> tuple[str, str]:
        if isinstance(value, tuple):
            return value
        key, sep, val = str(value).partition("=")
        if not sep or not key.strip():
            self.fail(f"{value!r} is not KEY=VALUE (e.g. hadoop.security.authentication=kerberos)", param, ctx)
        return key.strip(), val.strip()


SETTING = Setting()
