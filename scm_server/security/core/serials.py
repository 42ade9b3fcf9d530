"""Certificate serial numbers as people type them, parsed once into one canonical form (pure).

A serial is an integer; every table (``validCerts``, ``validSCMCerts``, ``revokedCertificates``) and
every check (the per-call revocation check reads ``cert.serial_number``) keys it by its **canonical
form**: the decimal digits of the integer, ASCII, no sign, no leading zero. Input is accepted in two
spellings only:

* decimal: ASCII digits ``0-9`` with no leading zero (``0123`` is refused: is it octal?);
* hexadecimal: ``0x`` (or ``0X``) followed by ASCII hex digits, as openssl prints serials; colons
  between byte pairs (``0x01:2a:ff``) are accepted too.

Anything else, among it Unicode digits that Python's ``int()`` would accept (``"١٢٣"``), signs,
underscores, spaces inside, is refused with :class:`SerialError` naming the input and the accepted
spellings. Serials are positive and at most 20 octets (RFC 5280).

Who calls it: the CLI (``admin cert revoke|info``), the certificate admin servicer, the CA server,
the replicated revocation table (which refuses non-canonical keys). No I/O.
"""

from __future__ import annotations

import re

from scm_server.security.core.certificates import MAX_SERIAL, PKIError

_DECIMAL = re.compile(r"0|[1-9][0-9]*", re.ASCII)
_HEX = re.compile(r"0[xX](?:[0-9a-fA-F]+(?::[0-9a-fA-F]+)*)", re.ASCII)
_HINT = "give the serial in decimal (e.g. 1234) or in hex with 0x (e.g. 0x4d2)"


class SerialError(PKIError):
    """A serial id that is not one of the accepted spellings, or out of range."""


def parse_serial(text: str) -> int:
    """The integer a typed serial names; refuses anything but canonical decimal or ``0x`` hex."""
    if not isinstance(text, str):
        raise SerialError(f"serial id {text!r} is not text; {_HINT}")
    value = text.strip(" \t")
    if len(value) > 128:
        raise SerialError(f"serial id {value[:20]!r}... is too long; {_HINT}")
    if _DECIMAL.fullmatch(value):
        number = int(value, 10)
    elif _HEX.fullmatch(value):
        number = int(value[2:].replace(":", ""), 16)
    elif value.isascii() and value.isdigit():
        raise SerialError(f"serial id {value!r} has a leading zero; {_HINT} (without leading zeros)")
    else:
        raise SerialError(f"serial id {value!r} is not a serial number; {_HINT}, ASCII digits only")
    if not 0 < number <= MAX_SERIAL:
        raise SerialError(f"serial id {value!r} is out of range (1 .. 2^159-1, RFC 5280); {_HINT}")
    return number


def canonical_serial(text: str) -> str:
    """The one form serials are stored and compared in: decimal ASCII, no leading zero."""
    return str(parse_serial(text))


def is_canonical(text: str) -> bool:
    """True if ``text`` is already the canonical form of a valid serial."""
    try:
        return canonical_serial(text) == text
    except SerialError:
        return False


def legacy_serial(text: str) -> str | None:
    """The canonical form of a serial key stored before serials were canonical (``0123``, Unicode
    digits: what ``int()`` made of them), or None if it names no integer. Only for reading old
    records so that what an administrator once revoked stays revoked."""
    try:
        number = int(text.strip())
    except ValueError:
        return None
    return str(number) if 0 < number <= MAX_SERIAL else None
