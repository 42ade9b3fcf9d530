"""Verification tools: a linearizability checker (Wing-Gong/Lowe, as in Porcupine), models,
history recording and rendering. A library so that the Raft chaos tests and the SCM HA tests
share one checker; it depends on nothing else in ``scm_server``.
"""

from scm_server.verify.history import HistoryRecorder, OpHandle, RecordedOp, load_history, parse_jepsen_log
from scm_server.verify.linearizability import (
    UNKNOWN,
    CheckResult,
    Operation,
    PartitionResult,
    Verdict,
    check_operations,
)
from scm_server.verify.models import (
    KvInput,
    KvModel,
    Model,
    RegisterInput,
    RegisterModel,
    UniqueIdResult,
    check_unique_ids,
)
from scm_server.verify.render import render_html, render_text, write_report

__all__ = [
    "UNKNOWN",
    "CheckResult",
    "HistoryRecorder",
    "KvInput",
    "KvModel",
    "Model",
    "OpHandle",
    "Operation",
    "PartitionResult",
    "RecordedOp",
    "RegisterInput",
    "RegisterModel",
    "UniqueIdResult",
    "Verdict",
    "check_operations",
    "check_unique_ids",
    "load_history",
    "parse_jepsen_log",
    "render_html",
    "render_text",
    "write_report",
]
