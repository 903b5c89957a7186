"""A run's provenance record in the state store: table ``provenance(job_id PRIMARY KEY, created,
location, record)`` (schema: ``launcher.state.schema``). The record is a JSON text made and
redacted by ``launcher.provenance.record``; LOCATION is where its RUN.json copy was written.
A launch writes it in the transaction that records the submission
(``StateStore.record_submission(provenance=...)``)."""

from __future__ import annotations

import time
from typing import Optional

INSERT = ("INSERT INTO provenance(job_id, created, location, record) VALUES(?,?,?,?) ON CONFLICT (job_id) DO UPDATE "
          "SET created=excluded.created, location=excluded.location, record=excluded.record")


def save(store, job_id: str, location: Optional[str], text: str) -> None:
    """Keep JOB_ID's record TEXT (replacing an earlier one)."""
    with store.tx(jobs=[job_id]) as db:
        db.execute(INSERT, (job_id, time.time(), location, text))


def load(store, job_id: str) -> Optional[tuple]:
    """(record text, location) of JOB_ID (exact id), or None."""
    row = store.db.execute("SELECT record, location FROM provenance WHERE job_id=?", (job_id,)).fetchone()
    return (row["record"], row["location"]) if row is not None else None
