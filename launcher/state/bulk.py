"""The state store's bulk writes (``StateStore.bulk``): what a sweep of 1,000
elements writes once submitted and on each status call, in ONE transaction with
``executemany``, leaving exactly the rows, attempts and events the one-job writes would
(tests/unit/test_state_bulk.py). Recording a sweep before it is submitted: ``launcher.state.sweeps``.
"""

from __future__ import annotations

import json
import time

from launcher.core.redact import mask_values, redact_obj, redact_text
from launcher.core.status import attempt_ended, is_final, job_state_for
from launcher.state import wakeups
from launcher.state.rows import ATTEMPT_REPLACED, AttemptRow, mirrored_state, reopened

CHUNK = 500  # job ids per IN (...) query, under SQLite's variable limit
NOTICED = "attempt_ended"  # the event of a status call that first saw an attempt end without completing


class BulkStore:
    """Many jobs' attempts written or read at once (a sweep's submission, a status refresh):
    ``StateStore.bulk``, one transaction each, on the store's connection."""

    def __init__(self, store):
        self.store = store

    def record_submitted(self, target: str, entries, state: str = "PENDING", detail=None) -> list:
        """What ``record_submission`` (attempt 1, its "submitted" event) writes for each job, for
        many jobs in ONE transaction. ENTRIES: (job_id, handle_json, native_id); each event's
        detail is {target, native_id, attempt, **DETAIL}. Cancel wins, as in
        ``record_submission``: a job cancelled while this submission was under way gets its
        attempt recorded (what the caller now cancels) and stays CANCELLED. Returns the ids of
        those jobs."""

        now, masks = time.time(), mask_values(())
        ids, native = [e[0] for e in entries], [e[2] for e in entries]
        common = redact_obj({"target": target, "native_id": "", "attempt": 1, **(detail or {})}, masks=masks)
        details = [json.dumps({**common, "native_id": redact_text(n, masks=masks)}, default=str) for n in native]
        job_state = job_state_for(state)
        with self.store.tx(jobs=ids) as db:
            rows = _rows(db, "state, meta", ids)
            cancelled = [j for j, r in rows.items() if r["state"] == "CANCELLED"]
            open_ids = set(ids) - set(cancelled)
            metas = reopened({j: r["meta"] for j, r in rows.items() if j in open_ids})
            db.executemany(
                "INSERT INTO attempts(job_id,attempt,target,native_id,handle,submitted,state,reason,resume_step,meta) "
                "VALUES(?,1,?,?,?,?,?,'',NULL,'{}') " + ATTEMPT_REPLACED,
                [(j, target, n, h, now, state) for j, h, n in entries])
            db.executemany("UPDATE jobs SET handle=?, state=?, target=?, updated=? WHERE job_id=?",
                           [(h, job_state, target, now, j) for j, h, _ in entries if j in open_ids])
            db.executemany("UPDATE jobs SET meta=? WHERE job_id=?", [(m, j) for j, m in metas.items()])
            db.executemany("INSERT INTO events(job_id,ts,kind,detail) VALUES(?,?,'submitted',?)",
                           [(j, now, d) for j, d in zip(ids, details)])
            wakeups.announce(self.store, db)  # a team's watchers: a sweep submitted
        return sorted(cancelled)

    def record_statuses(self, entries) -> None:
        """``update_attempt`` + ``mirror_state`` for many jobs in ONE transaction (one status
        call's results), writing only what changed (a sweep's poll mostly changes nothing).
        ENTRIES: (job_id, attempt, attempt fields, handle_json, state, reason)."""

        now = time.time()
        by_cols: dict = {}  # the same columns set: one executemany
        jobs, events = [], []
        with self.store.tx(jobs=[e[0] for e in entries]) as db:
            rows = _rows(db, "state, reason, handle, meta", [e[0] for e in entries])
            stored = _attempt_fields(db, entries)
            for job_id, attempt, fields, handle_json, state, reason in entries:
                row = stored.get((job_id, attempt))
                if fields and not _same(row, fields) and not _rewinds(row, fields):
                    by_cols.setdefault(tuple(fields), []).append((*fields.values(), job_id, attempt))
                    if _noticed_end(row, fields):  # when the launcher learned it: the report's detection clock
                        events.append((job_id, now, NOTICED, json.dumps({"attempt": attempt, "state": fields["state"]})))
                new = mirrored_state(rows.get(job_id), handle_json, state)
                if new is None or (new, reason) == (rows[job_id]["state"], rows[job_id]["reason"]):
                    continue  # nothing changed: nothing written
                jobs.append((new, reason, now, job_id))
                rows[job_id] = {**rows[job_id], "state": new}  # a job listed twice sees its own change
                if is_final(new):
                    events.append((job_id, now, "done", json.dumps({"reason": new.lower()})))
            for cols, values in by_cols.items():
                db.executemany(f"UPDATE attempts SET {', '.join(f'{k}=?' for k in cols)} WHERE job_id=? AND attempt=?",
                               values)
            db.executemany("UPDATE jobs SET state=?, reason=?, updated=? WHERE job_id=?", jobs)
            db.executemany("INSERT INTO events(job_id,ts,kind,detail) VALUES(?,?,?,?)", events)

    def attempts_of(self, job_ids) -> dict:
        """{job id: [AttemptRow] in attempt order} for many jobs in a few queries."""

        out: dict = {j: [] for j in job_ids}
        for chunk in chunks(list(out)):
            q = f"SELECT * FROM attempts WHERE job_id IN ({','.join('?' * len(chunk))}) ORDER BY job_id, attempt"
            for r in self.store.db.execute(q, chunk).fetchall():
                meta = r["meta"]
                out[r["job_id"]].append(AttemptRow(**{**dict(r), "meta": json.loads(meta) if meta and meta != "{}"
                                                      else {}}))
        return out


def chunks(ids: list) -> list:
    return [ids[i:i + CHUNK] for i in range(0, len(ids), CHUNK)]


def _rows(db, cols: str, job_ids) -> dict:
    """{job id: row} of the jobs table's COLS for JOB_IDS (missing jobs absent)."""
    out = {}
    for chunk in chunks(list(dict.fromkeys(job_ids))):
        q = f"SELECT job_id, {cols} FROM jobs WHERE job_id IN ({','.join('?' * len(chunk))})"
        out.update({r["job_id"]: dict(r) for r in db.execute(q, chunk).fetchall()})
    return out


def _attempt_fields(db, entries) -> dict:
    """{(job id, attempt): the stored values of the attempt columns ENTRIES set}."""
    cols = sorted({k for e in entries for k in (e[2] or ())})
    if not cols:
        return {}
    out = {}
    for chunk in chunks(list(dict.fromkeys(e[0] for e in entries))):
        q = (f"SELECT job_id, attempt, {', '.join(cols)} FROM attempts "
             f"WHERE job_id IN ({','.join('?' * len(chunk))})")
        out.update({(r["job_id"], r["attempt"]): r for r in db.execute(q, chunk).fetchall()})
    return out


def _rewinds(row, fields: dict) -> bool:
    """Would FIELDS take an ended attempt back to a running state? A status read before the
    attempt ended, written after another watcher recorded its end (and maybe its next attempt),
    never does: an attempt that ended stays ended (a scheduler's restart in place is a new
    attempt row)."""
    return row is not None and "state" in fields and attempt_ended(row["state"] or "") \
        and not attempt_ended(fields["state"] or "")


def _noticed_end(row, fields: dict) -> bool:
    """Does FIELDS record, for the first time, that an attempt ended without completing?"""
    new = str(fields.get("state") or "")
    return row is not None and attempt_ended(new) and new != "COMPLETED" and not attempt_ended(row["state"] or "")


def _same(row, fields: dict) -> bool:
    return row is not None and all(row[k] == v for k, v in fields.items())


def _column(db, col: str, job_ids) -> dict:
    return {j: r[col] for j, r in _rows(db, col, job_ids).items()}
