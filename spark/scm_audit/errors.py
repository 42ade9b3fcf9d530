"""The audit's one error type: a problem the user can fix, described in one line."""

from __future__ import annotations


class AuditError(Exception):
    """Bad input or environment (no export, wrong format, no Java, unreachable master...)."""
