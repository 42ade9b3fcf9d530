"""Parsing of Ozone's value syntaxes (durations, sizes, booleans, numbers), as pure functions of (key, text).

Called by the typed groups (:mod:`scm_server.conf.groups`, which also parse their default texts with them) and
by :class:`~scm_server.conf.ozone_configuration.OzoneConfiguration`'s typed getters. A malformed value raises
:class:`~scm_server.exceptions.ConfigError` naming the key, the value and a valid example. No I/O.
"""

from __future__ import annotations

import math
import re
from datetime import timedelta

from scm_server.exceptions import ConfigError

_DURATION_UNITS: dict[str, float] = {
    "ns": 1e-9,
    "us": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
    "d": 86400.0,
}
_DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")
_ISO_RE = re.compile(r"^P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?$", re.IGNORECASE)

_SIZE_UNITS: dict[str, int] = {
    "": 1,
    "b": 1,
    "k": 1 << 10,
    "kb": 1 << 10,
    "m": 1 << 20,
    "mb": 1 << 20,
    "g": 1 << 30,
    "gb": 1 << 30,
    "t": 1 << 40,
    "tb": 1 << 40,
    "p": 1 << 50,
    "pb": 1 << 50,
}
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")

_TRUE = {"true", "yes", "1", "on"}
_FALSE = {"false", "no", "0", "off"}


def parse_duration(key: str, value: str, default_unit: str = "ms") -> timedelta:
    """Parse Ozone's TimeDuration syntax: ``30s``, ``5m``, ``1h``, ``100ms``, ``2d``, plain millis,
    or ISO-8601 ``PT2H`` / ``P1D``. Raises ConfigError naming ``key`` on anything else."""
    text = value.strip()
    iso = _ISO_RE.match(text)
    if iso and text.upper() not in ("P", "PT") and any(iso.groups()):
        days, hours, minutes, seconds = iso.groups()
        try:
            return timedelta(
                days=int(days or 0),
                hours=int(hours or 0),
                minutes=int(minutes or 0),
                seconds=float(seconds or 0),
            )
        except (OverflowError, ValueError):
            raise _too_large(key, value) from None
    m = _DURATION_RE.match(text)
    unit = m.group(2).lower() if m else ""
    if not m or (unit and unit not in _DURATION_UNITS):
        raise ConfigError(
            f"{key}: invalid duration {value!r}; use a number with a unit ns/us/ms/s/m/h/d "
            f"(e.g. {key}=30s) or plain milliseconds (e.g. 30000)"
        )
    seconds_value = float(m.group(1)) * _DURATION_UNITS[unit or default_unit]
    try:
        return timedelta(seconds=seconds_value)
    except (OverflowError, ValueError):
        raise _too_large(key, value) from None


def _too_large(key: str, value: str) -> ConfigError:
    return ConfigError(f"{key}: duration {value!r} is too large; use at most a few years (e.g. {key}=30s)")


def parse_size(key: str, value: str) -> int:
    """Parse Ozone's StorageSize syntax (``5GB``, ``256MB``, ``0.5GB``, ``1024``) into bytes."""
    m = _SIZE_RE.match(value)
    unit = m.group(2).lower() if m else ""
    if not m or unit not in _SIZE_UNITS:
        raise ConfigError(
            f"{key}: invalid size {value!r}; use a number with a unit B/KB/MB/GB/TB/PB "
            f"(e.g. {key}=5GB) or plain bytes"
        )
    size = float(m.group(1)) * _SIZE_UNITS[unit]
    if math.isinf(size) or size >= 1 << 63:
        raise ConfigError(f"{key}: size {value!r} is too large; use at most a few PB (e.g. {key}=5GB)")
    return math.floor(size)


def parse_bool(key: str, value: str) -> bool:
    low = value.strip().lower()
    if low in _TRUE:
        return True
    if low in _FALSE:
        return False
    raise ConfigError(f"{key}: invalid boolean {value!r}; use true or false (e.g. {key}=true)")


def parse_int(key: str, value: str) -> int:
    try:
        return int(value.strip())
    except ValueError:
        raise ConfigError(f"{key}: invalid integer {value!r}; use a whole number (e.g. {key}=3)") from None


def parse_float(key: str, value: str) -> float:
    try:
        result = float(value.strip())
    except ValueError:
        raise ConfigError(f"{key}: invalid number {value!r}; use a decimal number (e.g. {key}=0.9)") from None
    if math.isnan(result) or math.isinf(result):
        raise ConfigError(f"{key}: invalid number {value!r}; use a finite decimal (e.g. {key}=0.9)")
    return result
