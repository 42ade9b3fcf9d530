"""Verification tools: a linearizability checker (Wing-Gong/Lowe, as in Porcupine), models,
history recording and rendering. A library so that the Raft chaos tests and the SCM HA tests
share one checker (it imports ``scm_server.raft``/``scm_server.proto`` only in ``kvcluster``
and ``chaos``, the real-process harness for the demo KV server).

Typical use from an asyncio test::

    rec = HistoryRecorder()
    h = rec.invoke(client_id, kv_put("k", "v1"))      # just before sending
    try:
        await client.put("k", "v1"); h.ok(None)       # definite result
    except DefinitelyNotApplied: h.fail()
    except Exception: h.info()                        # unknown: may or may not have applied
    ...
    result = check_operations(KvModel(), rec.operations(), timeout=60)
    if not result.ok: write_report(result, KvModel(), keep_dir, "history")
    # ID allocators (SCM sequence / container IDs): check_unique_ids(ops, require_increasing=True)
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
