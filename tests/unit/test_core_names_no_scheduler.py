"""The core names no scheduler (issue 19 §3, §8; issue 34 §3): no code under launcher/ spells a
scheduler's program (sbatch, scontrol, squeue, scancel, sacct, sinfo), a Slurm variable
(SLURM_...), SkyPilot's SDK (sky.<name>, import sky), or a scheduler's name (slurm, skypilot, in
any case) in an identifier (``slurm_h``, ``SLURM``) or a string (``"slurm_hours"``, ``"the Slurm
copy"``). What a scheduler calls things is its backend's business (backends/slurm,
backends/skypilot); the core asks through the seam (launcher.backend.protocols) and says "queue".

The check reads tokens, not lines (``tokenize``): comments and docstrings -- any string that
stands alone as a statement -- may explain in a scheduler's words; identifiers and string
literals used as values may not. The CLI's own words (strings under launcher/commands and in
launcher/cli.py: help texts) may name a scheduler, never a program or a variable."""

import io
import re
import token
import tokenize
from pathlib import Path

import launcher

PKG = Path(launcher.__file__).parent

PROGRAMS = re.compile(r"(?<![A-Za-z0-9])(?:sbatch|scontrol|squeue|scancel|sacct|sinfo)(?![A-Za-z])", re.IGNORECASE)
VARIABLE = re.compile(r"SLURM_")
SKY_IN_TEXT = re.compile(r"(?<![A-Za-z0-9_])sky\.[A-Za-z_]")
NAME = re.compile(r"slurm|skypilot", re.IGNORECASE)
# where strings are the CLI's help texts and messages: a scheduler's name may appear in them
HELP_TEXTS = ("commands/", "cli.py")

# Tokens after which a new statement starts (a string there that is followed by the end of
# the statement is an expression statement: a docstring, or a bare explanatory string).
_STATEMENT_START = {token.NEWLINE, token.NL, token.INDENT, token.DEDENT, tokenize.ENCODING}
_IGNORED = {token.NL, token.COMMENT}
_STRING_PARTS = {token.STRING} | {getattr(token, n) for n in ("FSTRING_START", "FSTRING_MIDDLE", "FSTRING_END")
                                   if hasattr(token, n)}


def _code_tokens(source: str):
    """The tokens of ``source`` that are code: comments and expression-statement strings dropped."""
    toks = [t for t in tokenize.generate_tokens(io.StringIO(source).readline)]
    out = []
    i, prev = 0, tokenize.ENCODING
    while i < len(toks):
        t = toks[i]
        if t.type in _IGNORED:
            i += 1
            continue
        if prev in _STATEMENT_START and (t.type in _STRING_PARTS or t.string == "("):
            # strings (implicitly concatenated, maybe parenthesised) standing alone as a statement?
            j, depth, strings = i, 0, False
            while j < len(toks):
                u = toks[j]
                if u.type in _STRING_PARTS:
                    strings = True
                elif u.string == "(" and not strings:
                    depth += 1
                elif u.string == ")" and depth:
                    depth -= 1
                elif u.type not in _IGNORED:
                    break
                j += 1
            if strings and depth == 0 and (j >= len(toks) or toks[j].type in (token.NEWLINE, token.ENDMARKER)):
                i, prev = j, token.NEWLINE
                continue
        out.append(t)
        prev = t.type
        i += 1
    return out


def violations(source: str, where: str = "<src>") -> list[str]:
    found = []
    toks = _code_tokens(source)
    help_texts = where.startswith(HELP_TEXTS)
    for k, t in enumerate(toks):
        text = t.string
        hit = None
        if t.type == token.NAME:
            if PROGRAMS.search(text) or VARIABLE.search(text) or NAME.search(text):
                hit = text
            elif text == "sky":
                nxt = toks[k + 1] if k + 1 < len(toks) else None
                before = toks[k - 1] if k else None
                # sky.<x>, import sky, from sky import ...; not an attribute or keyword named "sky"
                if (nxt is not None and nxt.string == ".") or (before is not None and before.string in ("import", "from")):
                    if before is None or before.string != ".":
                        hit = text
        elif t.type in _STRING_PARTS:
            if PROGRAMS.search(text) or VARIABLE.search(text) or SKY_IN_TEXT.search(text) \
                    or (NAME.search(text) and not help_texts):
                hit = text
        if hit is not None:
            found.append(f"{where}:{t.start[0]}: {hit.strip()}")
    return found


# Documented exceptions: (file, text of the hit) -> why it stays for now.
ALLOWED = {
    ("recovery/state.py", '"slurm_'):
        "BurstRace's stored keys (slurm_attempt, slurm_target, slurm_handle): the job row's meta as "
        "earlier versions wrote it, kept so that a store loads either way; the fields are queued_*.",
    ("plan/deadline.py", '"slurm"'):
        "_STORED_KINDS: placements earlier versions stored as slurm:TARGET are read as queue:TARGET.",
    ("provenance/capture.py", '"s'):
        "versions.slurm / versions.skypilot in the provenance record (a stored format users compare "
        "with `launcher provenance diff`); backend.version is the neutral one. Left for a change that "
        "asks the backend for its versions and keeps reading these keys.",
    ("provenance/diff.py", 'slurm"'):
        "the same record key, compared by `launcher provenance diff` (see provenance/capture.py).",
    ("provenance/diff.py", 'skypilot"'):
        "the same record key, compared by `launcher provenance diff` (see provenance/capture.py).",
    ("provenance/lineage.py", "skypilot {v.get('skypilot')"):
        "the same record key, shown by `launcher provenance` (see provenance/capture.py).",
    ("core/errors.py", "launcher[skypilot]"):
        "the install hint for a missing SDK names this distribution's own pip extra.",
    ("backend/config.py", "backend: slurm"):
        "the unknown-target error shows a config snippet to copy, with the built-in backends' names.",
    ("commands/report.py", "(Slurm sacct)"):
        "`launcher report --help` text (user-facing prose kept verbatim; launcher/commands is "
        "outside this change).",
}


def _allowed(hit: str) -> bool:
    path = hit.split(":", 1)[0]
    return any(path == f and text in hit for f, text in ALLOWED)


def _all_violations(root: Path = PKG) -> list[str]:
    found = []
    for p in sorted(root.rglob("*.py")):
        found += violations(p.read_text(), str(p.relative_to(root)))
    return found


def test_no_code_under_launcher_names_a_scheduler():
    assert [hit[:120] for hit in _all_violations() if not _allowed(hit)] == []


def test_every_documented_exception_is_still_needed():
    hits = _all_violations()
    assert [key for key in ALLOWED if not any(h.split(":", 1)[0] == key[0] and key[1] in h for h in hits)] == []


def test_the_guard_catches_what_it_guards_against():
    bad = [
        'cmd = ["sbatch", "--parsable"]\n',
        'x = os.environ.get("SLURM_JOB_ID")\n',
        'def run_scontrol(x):\n    return x\n',
        'import sky\n',
        'sky.launch(task)\n',
        'from sky import Task\n',
        'name = f"{a}_{b}" if squeue_ok else "x"\n',
        'msg = f"see SLURM_RESTART_COUNT={n}"\n',
        'def f():\n    """ok"""\n    return "scancel"\n',
        'print("a"\n      "sacct")\n',
        'x = "sky.exec"\n',
        # a scheduler's name in an identifier or a string used as a value
        'slurm_h = 1\n',
        'SLURM = "queue"\n',
        'class SkyPilotThing:\n    pass\n',
        'kind = "slurm"\n',
        'd = {"slurm_hours": 1}\n',
        'raise ValueError(f"the Slurm copy {x} started")\n',
    ]
    for src in bad:
        assert violations(src), src


def test_the_guard_lets_comments_and_docstrings_explain():
    fine = [
        '# sbatch, SLURM_JOB_ID and sky.launch explained here\nx = 1\n',
        '"""Module docstring: runs sbatch; reads SLURM_RESTART_COUNT."""\n',
        'def f():\n    """Calls scontrol requeue, like sky.exec."""\n    return 1\n',
        'class C:\n    "squeue --start"\n    x = 1\n',
        'def f():\n    ("implicitly "\n     "concatenated sacct text")\n    return 2\n',
        'sky_limit = 2\nself.sky = 3\nqueued_h = 1\n',
        'x = "basinfo"\n',
    ]
    for src in fine:
        assert violations(src) == [], (src, violations(src))


def test_the_cli_help_texts_may_name_a_scheduler_but_not_its_programs():
    assert violations('_HELP = """Slurm targets"""\n', "commands/plan.py") == []
    assert violations('@click.option("--x", help="Ask Slurm targets.")\n', "cli.py") == []
    assert violations('_HELP = "see squeue"\n', "commands/plan.py")
    assert violations('slurm_only = True\n', "commands/plan.py")
    assert violations('_HELP = "Slurm targets"\n', "plan/offers.py")


def test_a_planted_violation_under_launcher_fails_the_check(tmp_path):
    planted = tmp_path / "launcher"
    planted.mkdir()
    (planted / "ok.py").write_text('"""docstring that names sbatch"""\n# SLURM_JOB_ID in a comment\n')
    (planted / "bad.py").write_text('import os\n\nJOB = os.environ.get("SLURM_JOB_ID", "")\n')
    assert _all_violations(planted) == ['bad.py:3: "SLURM_JOB_ID"']
