"""docs/security.md's step 1 of "A secure Ozone cluster on this SCM" runs as written against a real MIT KDC: each
`kadmin.local -q` line (the keytab directory moved from /etc/security/keytabs to the test's own), and each keytab
then holds its principal's key (kinit -kt succeeds with it)."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from tests.kerberos.documented import documented_block
from tests.kerberos.kdc import MiniKdc

pytestmark = pytest.mark.kerberos

KEYTABS = "/etc/security/keytabs/"


def test_the_documented_principals_and_keytabs_are_made_as_written(kdc: MiniKdc, tmp_path: Path) -> None:
    lines = documented_block("**1. Principals and keytabs**")
    made: dict[str, Path] = {}
    for line in lines:
        argv = shlex.split(line)
        assert argv[:2] == ["kadmin.local", "-q"] and len(argv) == 3, line
        query = argv[2]
        words = query.split()
        if words[0] == "ktadd":
            assert words[1] == "-k" and words[2].startswith(KEYTABS), query
            keytab = tmp_path / words[2][len(KEYTABS):]
            made[words[3]] = keytab
            query = query.replace(words[2], str(keytab))
        else:
            assert words[:2] == ["addprinc", "-randkey"], query
        kdc.kadmin(query)
    assert sorted(p.split("/")[0] for p in made) == ["dn", "om", "scm"], made
    for principal, keytab in made.items():
        assert kdc.kinit(principal, keytab, keytab.stem).exists(), principal
