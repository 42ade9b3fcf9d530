"""What a user asks of the operator through annotations on the ``OzoneSCMCluster`` (the kubectl plugin writes them).

Pure: annotations in, a :class:`Directives` value out. Read by the reconciler from the resource and passed to the
planner, which decides when and whether to honour each one:

* ``ozone-scm.io/switchover-to: <member>``: move Raft leadership to that member (a caught-up voter), then the
  operator removes the annotation and records an Event (done, or refused and why);
* ``ozone-scm.io/restartedAt: <timestamp>``: restart every member (as ``kubectl rollout restart`` does with its
  own annotation): the value is folded into the Pod revision, so the normal roll runs with all its gates --
  followers first, the leader last after a transfer, never below a live majority;
* ``ozone-scm.io/restartedAt.<member>: <timestamp>``: restart that one member, through the same roll;
* ``ozone-scm.io/hibernation: on|off``: ``on`` removes the member Pods and keeps their volumes; ``off`` (or no
  annotation) starts them again from those volumes.

The restart annotations stay on the resource (removing one changes the revision back and rolls again).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from ozone_scm_operator import API_GROUP

ANN_SWITCHOVER_TO = f"{API_GROUP}/switchover-to"
ANN_RESTARTED_AT = f"{API_GROUP}/restartedAt"
ANN_MEMBER_RESTARTED_AT = f"{API_GROUP}/restartedAt."  # followed by the member's name
ANN_HIBERNATION = f"{API_GROUP}/hibernation"
HIBERNATION_ON = "on"
HIBERNATION_OFF = "off"


def member_restart_annotation(member: str) -> str:
    return f"{ANN_MEMBER_RESTARTED_AT}{member}"


@dataclasses.dataclass(frozen=True)
class Directives:
    switchover_to: str | None = None
    restarted_at: str | None = None
    member_restarts: tuple[tuple[str, str], ...] = ()  # (member, timestamp), sorted by member
    # True: on, False: off or absent, None: a value that is neither (the recorded state is kept)
    hibernation: bool | None = False
    problems: tuple[str, ...] = ()  # one line each: the annotation, its value, and what to write instead

    def member_restarted_at(self, member: str) -> str | None:
        return next((ts for m, ts in self.member_restarts if m == member), None)


def read_directives(annotations: Mapping[str, str] | None) -> Directives:
    ann = dict(annotations or {})
    problems: list[str] = []
    switchover = (ann.get(ANN_SWITCHOVER_TO) or "").strip() or None
    restarted = (ann.get(ANN_RESTARTED_AT) or "").strip() or None
    members = tuple(sorted(
        (k[len(ANN_MEMBER_RESTARTED_AT):], v.strip())
        for k, v in ann.items()
        if k.startswith(ANN_MEMBER_RESTARTED_AT) and len(k) > len(ANN_MEMBER_RESTARTED_AT) and v and v.strip()
    ))
    raw = ann.get(ANN_HIBERNATION)
    hibernation: bool | None = False
    if raw is not None:
        value = raw.strip().lower()
        if value == HIBERNATION_ON:
            hibernation = True
        elif value in (HIBERNATION_OFF, ""):
            hibernation = False
        else:
            hibernation = None
            problems.append(
                f"annotation {ANN_HIBERNATION} is {raw!r}; set it to {HIBERNATION_ON!r} or {HIBERNATION_OFF!r} "
                "(until then the cluster stays as it is)"
            )
    return Directives(switchover_to=switchover, restarted_at=restarted, member_restarts=members,
                      hibernation=hibernation, problems=tuple(problems))
