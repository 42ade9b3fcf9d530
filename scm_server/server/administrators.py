"""The administrators an edge checks, as a collection that follows a run-time reconfiguration.

Ozone's SCM re-reads ``ozone.administrators`` and ``ozone.readonly.administrators`` when ``ozone admin reconfig
--service=SCM start`` finds them changed, and its checks use the new lists from the next call on. Here the checks
(the security and secret-key protocols, container tokens, the web's /logLevel) hold a :class:`LiveAdministrators`
instead of a tuple, and the SCM facade's administrator listener replaces its contents; the Kerberos authorizer of
the location protocol is told the same through its own method.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator


class LiveAdministrators(Collection[str]):
    """A collection of user names whose contents :meth:`replace` swaps in one assignment (readers on the event
    loop see the old list or the new one, never a mix). ``always`` are kept whatever the configuration says (the
    SCM's own user)."""

    def __init__(self, names: Iterable[str], always: Iterable[str] = ()) -> None:
        self._always = tuple(always)
        self._names: tuple[str, ...] = ()
        self.replace(names)

    def replace(self, names: Iterable[str]) -> None:
        self._names = tuple(dict.fromkeys([*names, *self._always]))

    def __contains__(self, name: object) -> bool:
        return name in self._names

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)

    def __repr__(self) -> str:
        return f"LiveAdministrators({list(self._names)!r})"
