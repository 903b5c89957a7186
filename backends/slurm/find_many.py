"""The Slurm backend's ``find_many`` (``Scheduler.find_many``): which jobs carry the dedupe
tokens of many submissions, from ONE ``squeue`` of slurmctld's table (every job still known,
finished ones included until MinJobAge) and, for the tokens it does not show, at most one
``sacct`` of slurmdbd's accounting where there is one (Comment is stored with
AccountingStoreFlags=job_comment). A submission's token travels in its job's ``--comment``.

A token is carried by two jobs only when an attempt was submitted twice (a watcher frozen past
its claim, ``launcher.launching.submit``): then the one that claimed the attempt's start in its
job folder (``launcher.jobside.startclaim``) is the attempt, as on the local target; the other
stood down or will. Which of them squeue lists first says nothing."""

from __future__ import annotations

from typing import Callable, Iterable, Optional

from launcher.core.errors import TransientError

SQUEUE_TOKENS = ["squeue", "-h", "-t", "all", "-o", "%i|%k"]
SACCT_TOKENS = ["sacct", "-n", "-P", "-X", "-S", "now-30days", "-o", "JobID,Comment"]


def tokens_in(text: str, tokens: Iterable[str]) -> dict:
    """{token: the first job id carrying it} from ``id|comment`` lines."""
    return {t: ids[0] for t, ids in ids_in(text, tokens).items()}


def ids_in(text: str, tokens: Iterable[str]) -> dict:
    """{token: every job id carrying it, in the order listed} from ``id|comment`` lines."""
    want, out = set(tokens), {}
    for line in text.splitlines():
        jid, _, comment = line.partition("|")
        tok, jid = comment.strip(), jid.strip()
        if tok in want and jid.split("_")[0].isdigit() and jid not in out.get(tok, ()):
            out.setdefault(tok, []).append(jid)
    return out


def find_tokens(run: Callable, where: str, tokens: list,
                start_of: Optional[Callable[[str], Optional[str]]] = None) -> dict:
    """{token: Slurm's job id} of those of TOKENS a job carries; RUN(argv, check=False) runs a
    Slurm command (on WHERE). A failed squeue is a TransientError (nothing is known); a failed
    sacct leaves the tokens squeue did not show unfound. A token two jobs carry gives the one
    START_OF(token) names (the holder of that attempt's start), else the first listed."""
    if not tokens:
        return {}
    r = run(SQUEUE_TOKENS, check=False)
    if r.returncode != 0:
        raise TransientError(f"squeue failed on {where}: {r.stderr.strip()}")
    found = ids_in(r.stdout, tokens)
    if len(found) < len(tokens):
        r = run(SACCT_TOKENS, check=False)
        if r.returncode == 0:
            found.update(ids_in(r.stdout, [t for t in tokens if t not in found]))
    return {t: _the_attempt(t, ids, start_of) for t, ids in found.items()}


def _the_attempt(token: str, ids: list, start_of) -> str:
    if len(ids) == 1 or start_of is None:
        return ids[0]
    held = start_of(token)
    return held if held in ids else ids[0]
