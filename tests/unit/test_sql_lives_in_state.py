"""Every SQL statement of the project lives in ``launcher/state/``: the other packages call the
store's methods and get plain rows back (issue 19). A string literal or a call that looks like
SQL anywhere else in ``launcher/`` or ``backends/`` fails this test."""

from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

import launcher

ROOT = Path(launcher.__file__).resolve().parents[1]
SQL = re.compile(r"\b(SELECT\s.+\sFROM|INSERT\s+(OR\s+\w+\s+)?INTO|UPDATE\s+\w+\s+SET|DELETE\s+FROM|"
                 r"CREATE\s+(TABLE|INDEX)|PRAGMA\s)", re.IGNORECASE | re.DOTALL)
CALL = re.compile(r"\.(execute|executemany|executescript)\(")


def offenders(text: str) -> list[str]:
    out = []
    tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    for i, tok in enumerate(tokens):
        prev = tokens[i - 1] if i else None
        docstring = tok.type == tokenize.STRING and (prev is None or prev.type in (tokenize.INDENT, tokenize.NEWLINE,
                                                                                    tokenize.NL, tokenize.DEDENT))
        if tok.type == tokenize.STRING and not docstring and SQL.search(tok.string):
            out.append(f"{tok.start[0]}: {tok.string[:60]}")
    for n, line in enumerate(text.splitlines(), 1):
        if CALL.search(line.split("#", 1)[0]):
            out.append(f"{n}: {line.strip()[:60]}")
    return out


def test_no_sql_outside_the_state_package():
    found = {}
    for base in (ROOT / "launcher", ROOT / "backends"):
        for p in sorted(base.rglob("*.py")):
            if (ROOT / "launcher" / "state") in p.parents:
                continue
            hits = offenders(p.read_text())
            if hits:
                found[str(p.relative_to(ROOT))] = hits
    assert found == {}


def test_the_check_catches_sql_and_leaves_prose():
    assert offenders('q = "SELECT meta FROM jobs WHERE state=?"\n')
    assert offenders("db.execute(q, (1,))\n")
    assert offenders('x = "INSERT OR REPLACE INTO claims(job_id) VALUES(?)"\n')
    assert not offenders('def f():\n    """Select the jobs from the store and update them."""\n    return 1\n')
    assert not offenders("# db.execute(...) is the state package's\n")
