"""The notification outbox: table ``notifications`` (schema: ``launcher.state.schema``).

Deciding and delivering are two steps (``launcher.recovery.notify``):

* **decided once.** A row per (job, event), ``UNIQUE (job_id, event)``: the watcher that
  decides an event (under the job's claim) inserts it with ``ON CONFLICT DO NOTHING`` in one
  transaction, so however many watchers decide the same event, one row exists. A closed
  job's decision is marked ``final`` (even when its event is not one the spec asks for:
  state ``skipped``), so it is looked at once.
* **delivered under a lease, each try recorded before it is sent.** A watcher takes a due
  row's lease (a compare-and-swap on its state and lease) and counts the try (``tries + 1``)
  in the same transaction, sends, then records the answer only while the lease is its own:
  ``delivered``, or a retry later (``next_try``, with backoff), or ``undeliverable`` once
  ``max_tries`` tries are spent. Two watchers never send one row at the same time, and no
  row is sent more than ``max_tries`` times, whoever dies mid-send: a lease that expired
  with no answer recorded is an *interrupted* try (``reclaim``), counted already.

The row keeps the payload (redacted) and the sink: a URL without a token, or the *name* of
the environment variable that holds one, never its value.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Optional

from launcher.core.redact import redact_obj, redact_text
from launcher.core.status import FINAL_STATES

PENDING, DELIVERED, SKIPPED, UNDELIVERABLE = "pending", "delivered", "skipped", "undeliverable"


@dataclass(frozen=True)
class Notification:
    id: int
    job_id: str
    event: str
    state: str
    sink: dict
    payload: dict
    tries: int
    max_tries: int
    next_try: float
    delivered: Optional[float]
    last_error: str


def _row(r) -> Notification:
    return Notification(r["id"], r["job_id"], r["event"], r["state"], json.loads(r["sink"] or "{}"),
                        json.loads(r["payload"] or "{}"), r["tries"], r["max_tries"], r["next_try"],
                        r["delivered"], r["last_error"])


class Outbox:
    def __init__(self, store):
        self.store = store

    # ---- deciding
    def closed_unnoticed(self, limit: int = 500) -> list[str]:
        """Job ids of closed jobs whose spec (or sweep's spec) may ask for notifications (or
        tracks with MLflow, whose run ends with the job) and
        whose closing has not been decided on yet (no ``final`` row)."""
        finals = sorted(FINAL_STATES)
        marks = ",".join("?" * len(finals))
        db = self.store.db
        job_has, sweep_has = (db.engine.contains.format(column=c) for c in ("j.spec_yaml", "s.spec_yaml"))
        q = (f"SELECT j.job_id FROM jobs j WHERE j.state IN ({marks}) AND "
             f"({job_has} OR {job_has} OR (j.spec_yaml = '' AND "
             f"j.sweep_id IN (SELECT s.sweep_id FROM sweeps s WHERE {sweep_has} OR {sweep_has}))) AND NOT EXISTS "
             "(SELECT 1 FROM notifications n WHERE n.job_id = j.job_id AND n.final = 1) "
             "ORDER BY j.updated LIMIT ?")
        words = ("notify", "mlflow")
        return [r["job_id"] for r in db.execute(q, (*finals, *words, *words, limit)).fetchall()]

    def has(self, job_id: str, event: str) -> bool:
        return self.store.db.execute("SELECT 1 FROM notifications WHERE job_id=? AND event=?",
                                     (job_id, event)).fetchone() is not None

    def decide(self, job_id: str, event: str, *, send: bool, final: bool, sink: dict, payload: dict,
               max_tries: int = 8, now: Optional[float] = None) -> bool:
        """Record the decision on JOB_ID's EVENT once: to SEND it (pending) or not (skipped).
        True when this call recorded it (False: it was decided already)."""
        now = time.time() if now is None else now
        with self.store.tx() as db:
            cur = db.execute(
                "INSERT INTO notifications(job_id,event,final,created,state,sink,payload,max_tries,next_try) "
                "VALUES(?,?,?,?,?,?,?,?,?) ON CONFLICT (job_id, event) DO NOTHING",
                (job_id, event, 1 if final else 0, now, PENDING if send else SKIPPED, json.dumps(sink),
                 json.dumps(redact_obj(payload), default=str), max_tries, now))
            return cur.rowcount == 1

    # ---- delivering
    def due(self, now: Optional[float] = None, limit: int = 50) -> list[Notification]:
        now = time.time() if now is None else now
        rows = self.store.db.execute(
            "SELECT * FROM notifications WHERE state=? AND next_try<=? AND (lease_until IS NULL OR lease_until<?) "
            "ORDER BY next_try LIMIT ?", (PENDING, now, now, limit)).fetchall()
        return [_row(r) for r in rows]

    def next_due(self) -> Optional[float]:
        r = self.store.db.execute("SELECT MIN(next_try) AS t FROM notifications WHERE state=?", (PENDING,)).fetchone()
        return r["t"] if r is not None else None

    def lease(self, nid: int, owner: str, seconds: float, now: Optional[float] = None) -> int:
        """Take row NID's lease for SECONDS and count the try it is for, in one transaction:
        the try's number (1, 2 ...) when the lease is ours (pending, due, tries left, no other
        unexpired lease), else 0. The try is recorded before anything is sent."""
        now = time.time() if now is None else now
        with self.store.tx() as db:
            cur = db.execute("UPDATE notifications SET lease_owner=?, lease_until=?, tries=tries+1 WHERE id=? AND "
                             "state=? AND next_try<=? AND tries<max_tries AND "
                             "(lease_until IS NULL OR lease_until<? OR lease_owner=?)",
                             (owner, now + seconds, nid, PENDING, now, now, owner))
            if cur.rowcount != 1:
                return 0
            return int(db.execute("SELECT tries FROM notifications WHERE id=?", (nid,)).fetchone()["tries"])

    def reclaim(self, now: Optional[float] = None) -> list[Notification]:
        """Rows whose sender's lease expired before it recorded an answer (it died or froze
        mid-send: the try may have landed), released by this call: pending again for their next
        try, or undeliverable when that was their last. Each is returned to one caller only."""
        now = time.time() if now is None else now
        out = []
        with self.store.tx() as db:
            rows = db.execute("SELECT * FROM notifications WHERE state=? AND lease_owner IS NOT NULL AND "
                              "lease_until<?", (PENDING, now)).fetchall()
            for r in rows:
                n = _row(r)
                state = UNDELIVERABLE if n.tries >= n.max_tries else PENDING
                error = (f"try {n.tries} was interrupted: its watcher stopped before an answer was recorded "
                         "(it may have landed)")
                cur = db.execute("UPDATE notifications SET state=?, lease_owner=NULL, lease_until=NULL, last_error=? "
                                 "WHERE id=? AND lease_owner=? AND lease_until=?",
                                 (state, error, n.id, r["lease_owner"], r["lease_until"]))
                if cur.rowcount == 1:
                    out.append(Notification(n.id, n.job_id, n.event, state, n.sink, n.payload, n.tries,
                                            n.max_tries, n.next_try, n.delivered, error))
        return out

    def delivered(self, nid: int, owner: str, now: Optional[float] = None) -> bool:
        now = time.time() if now is None else now
        with self.store.tx() as db:
            cur = db.execute("UPDATE notifications SET state=?, delivered=?, lease_owner=NULL, "
                             "lease_until=NULL, last_error='' WHERE id=? AND lease_owner=?",
                             (DELIVERED, now, nid, owner))
            return cur.rowcount == 1

    def failed(self, nid: int, owner: str, error: str, retry_at: float, final: bool = False) -> str:
        """A try that failed: retried at RETRY_AT, or undeliverable once its tries are spent
        (or FINAL: no later try can do better). The row's new state ("" when the lease was no
        longer ours)."""
        with self.store.tx() as db:
            r = db.execute("SELECT tries, max_tries FROM notifications WHERE id=? AND lease_owner=?",
                           (nid, owner)).fetchone()
            if r is None:
                return ""
            state = UNDELIVERABLE if final or r["tries"] >= r["max_tries"] else PENDING
            db.execute("UPDATE notifications SET state=?, next_try=?, lease_owner=NULL, "
                       "lease_until=NULL, last_error=? WHERE id=?", (state, retry_at, redact_text(error)[:500], nid))
            return state

    def of_job(self, job_id: str) -> list[Notification]:
        rows = self.store.db.execute("SELECT * FROM notifications WHERE job_id=? ORDER BY id", (job_id,)).fetchall()
        return [_row(r) for r in rows]
