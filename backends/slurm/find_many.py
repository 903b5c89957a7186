"""The Slurm backend's ``find_many`` (``Scheduler.find_many``): which jobs carry the dedupe
tokens of many submissions, from ONE ``squeue`` of slurmctld's table (every job still known,
finished ones included until MinJobAge) and, for the tokens it does not show, at most one
``sacct`` of slurmdbd's accounting where there is one (Comment is stored with
AccountingStoreFlags=job_comment). A submission's token travels in its job's ``--comment``."""

from __future__ import annotations

from typing import Callable, Iterable

from launcher.core.errors import TransientError

SQUEUE_TOKENS = ["squeue", "-h", "-t", "all", "-o", "%i|%k"]
SACCT_TOKENS = ["sacct", "-n", "-P", "-X", "-S", "now-30days", "-o", "JobID,Comment"]


def tokens_in(text: str, tokens: Iterable[str]) -> dict:
    """{token: the first job id carrying it} from ``id|comment`` lines."""
    want, out = set(tokens), {}
    for line in text.splitlines():
        jid, _, comment = line.partition("|")
        tok, jid = comment.strip(), jid.strip()
        if tok in want and tok not in out and jid.split("_")[0].isdigit():
            out[tok] = jid
    return out


def find_tokens(run: Callable, where: str, tokens: list) -> dict:
    """{token: Slurm's job id} of those of TOKENS a job carries; RUN(argv, check=False) runs a
    Slurm command (on WHERE). A failed squeue is a TransientError (nothing is known); a failed
    sacct leaves the tokens squeue did not show unfound."""
    if not tokens:
        return {}
    r = run(SQUEUE_TOKENS, check=False)
    if r.returncode != 0:
        raise TransientError(f"squeue failed on {where}: {r.stderr.strip()}")
    found = tokens_in(r.stdout, tokens)
    if len(found) < len(tokens):
        r = run(SACCT_TOKENS, check=False)
        if r.returncode == 0:
            found.update(tokens_in(r.stdout, [t for t in tokens if t not in found]))
    return found
