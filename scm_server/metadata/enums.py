"""Typed helpers around generated protobuf enums (mypy-protobuf types enum values as NewTypes)."""

from __future__ import annotations

from typing import Any


def enum_name(wrapper: Any, value: int) -> str:
    """``enum_name(hdds_pb2.LifeCycleState, 4) -> "CLOSED"``; unknown numbers render as ``UNKNOWN(<n>)``."""
    try:
        return str(wrapper.Name(value))
    except ValueError:
        return f"UNKNOWN({value})"


def enum_value(wrapper: Any, name: str) -> int:
    return int(wrapper.Value(name))
