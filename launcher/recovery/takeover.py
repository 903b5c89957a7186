"""Who owns a checkpoint root, read from facts (pure): which generation each attempt of a
job really was, and whether a newer run took the root over.

Several job rows may share one checkpoint root (a killed job relaunched by hand, a
spec launched again). The root's GENERATIONS.json history says, for every start, the
job id, the attempt the launcher asked for (``attempt``, the ``--attempt-hint``) and the
step it resumed from. The generation number is not the attempt number once a root is
shared (a new job's first attempt continues the root's numbering), so attempts are
matched to generations by job id and attempt, never by number alone.
"""

from __future__ import annotations

from typing import Iterable, Optional


def _int(v) -> Optional[int]:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def own_records(job_id: str, history: Iterable[dict]) -> list[dict]:
    """The job's own starts under the root, oldest generation first."""
    mine = [h for h in history if h.get("job_id") == job_id and _int(h.get("generation")) is not None]
    return sorted(mine, key=lambda h: h["generation"])


def attempt_records(job_id: str, attempts: Iterable[int], history: Iterable[dict]) -> dict[int, dict]:
    """{attempt: the GENERATIONS.json record of its start}, for the attempts that started.

    A record names its attempt when the job side wrote one; older records are matched in
    order: the generation equal to the attempt (a root used by one job only), else the
    first later attempt that could have started it (a generation is never below its attempt)."""
    wanted = sorted(set(attempts))
    out: dict[int, dict] = {}
    prev = 0
    for h in own_records(job_id, history):
        g = h["generation"]
        a = _int(h.get("attempt"))
        if a is None or a not in wanted:
            if g in wanted and g > prev:
                a = g
            else:
                a = next((x for x in wanted if prev < x <= g), None)
        if a is None:
            continue
        out[a] = h  # a later start of the same attempt (a scheduler's own retry) wins
        prev = max(prev, a)
    return out


def resume_steps(job_id: str, attempts: Iterable[int], history: Iterable[dict]) -> dict[int, int]:
    """{attempt: the step it actually resumed from (-1: fresh start)}."""
    out = {}
    for a, h in attempt_records(job_id, attempts, history).items():
        s = _int(h.get("resume_step"))
        out[a] = -1 if s is None or s < 0 else s
    return out


def superseded_by(job_id: str, created: float, history: Iterable[dict],
                  later_jobs: Iterable[tuple] = ()) -> str:
    """Why the job's checkpoint root now belongs to a newer run ('' when it does not).

    ``later_jobs``: (job_id, created) of every job row with the same checkpoint root.
    A newer run is a job row launched after this one, or a generation started under the
    root after this job's own newest generation by anyone else (another job, another
    launcher home, a run by hand)."""
    newer_rows = sorted((c, j) for j, c in later_jobs if j != job_id and c > created)
    if newer_rows:
        c, j = newer_rows[0]
        return f"job {j} was launched later on the same checkpoint root and took it over"
    history = list(history)
    mine = own_records(job_id, history)
    if not mine:
        return ""
    own = mine[-1]["generation"]
    newer = [h for h in history if _int(h.get("generation")) is not None and h["generation"] > own
             and h.get("job_id") != job_id]
    if not newer:
        return ""
    h = min(newer, key=lambda x: x["generation"])
    who = f"job {h['job_id']}" if h.get("job_id") else "a run outside the launcher"
    return (f"generation {h['generation']} ({who}) started on the checkpoint root after this job's generation "
            f"{own}: a newer run took the root over")
