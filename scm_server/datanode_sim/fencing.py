"""Which SCM commands a datanode may execute: Ozone's HDDS-3988 term fencing, as a pure rule.

Datanodes heartbeat to every SCM but execute commands only from the leader. The leader stamps
its heartbeat response (``SCMHeartbeatResponseProto.term``) and each command (``term``) with
its Raft term; followers leave the term out. A datanode keeps the highest term it has seen
and drops:

* commands that carry no term and come in a response without a term (a non-leader answered);
* commands whose term is lower than the highest term seen (a deposed leader that has not
  noticed yet).

A command with a higher term raises the bar for everyone after it. No I/O, no clock: unit
tests drive it directly and the simulator calls it for every command it receives.
"""

from __future__ import annotations

import dataclasses

INVALID_TERM = -1


@dataclasses.dataclass
class CommandFence:
    highest_term: int | None = None
    accepted: int = 0
    dropped: int = 0

    def accept(self, response_term: int | None, command_term: int | None) -> bool:
        """True if the command may run; updates the highest term seen."""
        term = command_term if command_term is not None else response_term
        if term is None:
            self.dropped += 1
            return False
        if term == INVALID_TERM:
            # A non-Raft single SCM stamps INVALID_TERM; only accept it while no real term was seen.
            if self.highest_term is not None and self.highest_term > INVALID_TERM:
                self.dropped += 1
                return False
            self.highest_term = INVALID_TERM if self.highest_term is None else self.highest_term
            self.accepted += 1
            return True
        if self.highest_term is not None and term < self.highest_term:
            self.dropped += 1
            return False
        self.highest_term = term
        self.accepted += 1
        return True
