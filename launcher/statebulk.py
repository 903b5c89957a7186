"""The state store's bulk writes (``StateStore`` inherits them): what a sweep of 1,000
elements writes at launch and on each status call, in ONE transaction with ``executemany``,
leaving exactly the rows, attempts and events the one-job writes would (tests/unit/test_state_bulk.py).
"""

from __future__ import annotations

import json
import time
from dataclasses import replace

CHUNK = 500  # job ids per IN (...) query, under SQLite's variable limit


class BulkWrites:
    def begin_jobs(self, name, target, backend, spec_path, spec_yaml, rows) -> None:
        """``begin_job`` for many jobs of one spec (ROWS: (job_id, ckpt_root, meta)) in ONE
        transaction: all of them are recorded SUBMITTING, or none."""
        now = time.time()
        with self.tx() as db:
            db.executemany(
                "INSERT INTO jobs(job_id,name,target,backend,spec_path,spec_yaml,created,updated,state,ckpt_root,meta)"
                " VALUES(?,?,?,?,?,?,?,?,?,?,?)",
                [(job_id, name, target, backend, spec_path, spec_yaml, now, now, "SUBMITTING", root,
                  json.dumps(meta or {})) for job_id, root, meta in rows])

    def forget_jobs(self, job_ids) -> None:
        """``forget_job`` for many jobs in one transaction."""
        ids = [(j,) for j in job_ids]
        with self.tx() as db:
            for table in ("attempts", "events", "jobs"):
                db.executemany(f"DELETE FROM {table} WHERE job_id=?", ids)

    def record_submitted(self, target: str, entries, state: str = "PENDING") -> None:
        """What ``patch_meta`` + ``record_attempt`` (attempt 1) + ``record_event("submitted")``
        write for each job, for many jobs in ONE transaction. ENTRIES: (job_id, handle_json,
        native_id, meta changes, event detail)."""
        from .recovery.state import RecoveryState, patched
        from .redact import _masks, redact_obj
        from .status import job_state_for

        now, masks = time.time(), _masks(())
        attempts, jobs, events = [], [], []
        with self.tx() as db:
            metas = _column(db, "meta", [e[0] for e in entries])
            for job_id, handle_json, native_id, changes, detail in entries:
                meta = patched(json.loads(metas.get(job_id) or "{}"), changes)
                rs = RecoveryState.load(meta)
                if rs.closed:  # a recorded submission reopens the job (as record_attempt does)
                    meta = patched(meta, replace(rs, closed=False).changes_since(rs))
                attempts.append((job_id, 1, target, native_id, handle_json, now, state, "", None, "{}"))
                jobs.append((handle_json, job_state_for(state), target, now, json.dumps(meta), job_id))
                events.append((job_id, now, "submitted", json.dumps(redact_obj(detail, _masks_=masks), default=str)))
            db.executemany(
                "INSERT OR REPLACE INTO attempts(job_id,attempt,target,native_id,handle,submitted,state,reason,"
                "resume_step,meta) VALUES(?,?,?,?,?,?,?,?,?,?)", attempts)
            db.executemany("UPDATE jobs SET handle=?, state=?, target=?, updated=?, meta=? WHERE job_id=?", jobs)
            db.executemany("INSERT INTO events(job_id,ts,kind,detail) VALUES(?,?,?,?)", events)

    def record_statuses(self, entries) -> None:
        """``update_attempt`` + ``mirror_state`` for many jobs in ONE transaction (one status
        call's results). ENTRIES: (job_id, attempt, attempt fields, handle_json, state, reason)."""
        from .state import is_final, mirrored_state

        now = time.time()
        by_cols: dict = {}  # the same columns set: one executemany
        jobs, events = [], []
        with self.tx() as db:
            rows = _rows(db, "state, handle, meta", [e[0] for e in entries])
            for job_id, attempt, fields, handle_json, state, reason in entries:
                if fields:
                    by_cols.setdefault(tuple(fields), []).append((*fields.values(), job_id, attempt))
                new = mirrored_state(rows.get(job_id), handle_json, state)
                if new is None:
                    continue
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
        from .state import AttemptRow

        out: dict = {j: [] for j in job_ids}
        for chunk in _chunks(list(out)):
            q = f"SELECT * FROM attempts WHERE job_id IN ({','.join('?' * len(chunk))}) ORDER BY job_id, attempt"
            for r in self.db.execute(q, chunk).fetchall():
                out[r["job_id"]].append(AttemptRow(**{**dict(r), "meta": json.loads(r["meta"] or "{}")}))
        return out


def _chunks(ids: list):
    return [ids[i:i + CHUNK] for i in range(0, len(ids), CHUNK)]


def _rows(db, cols: str, job_ids) -> dict:
    """{job id: row} of the jobs table's COLS for JOB_IDS (missing jobs absent)."""
    out = {}
    for chunk in _chunks(list(dict.fromkeys(job_ids))):
        q = f"SELECT job_id, {cols} FROM jobs WHERE job_id IN ({','.join('?' * len(chunk))})"
        out.update({r["job_id"]: dict(r) for r in db.execute(q, chunk).fetchall()})
    return out


def _column(db, col: str, job_ids) -> dict:
    return {j: r[col] for j, r in _rows(db, col, job_ids).items()}
