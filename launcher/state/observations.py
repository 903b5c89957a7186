"""Spot capacity the launcher has seen, one row per (job, attempt), in the table
``spot_observations`` (schema: ``launcher.state.schema``). Plain rows in and out;
``launcher.plan.observed`` decides what an ended attempt is evidence of, and turns the rows
into the planner's observations."""

from __future__ import annotations

from typing import Optional


def record(store, key: tuple, node_hours: float, events: int, kind: str, ts: float,
           job_id: Optional[str] = None, attempt: Optional[int] = None) -> None:
    """Store one observation at KEY (cloud, region, zone, instance type, spot); with JOB_ID and
    ATTEMPT it replaces that attempt's earlier row (an attempt is never counted twice)."""
    cloud, region, zone, itype, spot = key
    with store.tx(jobs=()) as db:  # one upsert
        db.execute(
            "INSERT INTO spot_observations(cloud,region,zone,instance_type,spot,node_hours,events,kind,ts,job_id,"
            "attempt) VALUES(?,?,?,?,?,?,?,?,?,?,?) ON CONFLICT (job_id, attempt) DO UPDATE SET cloud=excluded.cloud, "
            "region=excluded.region, zone=excluded.zone, instance_type=excluded.instance_type, spot=excluded.spot, "
            "node_hours=excluded.node_hours, events=excluded.events, kind=excluded.kind, ts=excluded.ts",
            (cloud, region, zone, itype, int(spot), node_hours, events, kind, ts, job_id, attempt))


def since(store, ts: float) -> list:
    """The observations made at TS or later, oldest first (rows with the columns cloud,
    region, zone, instance_type, spot, node_hours, events, kind, ts)."""
    return store.db.execute(
        "SELECT cloud,region,zone,instance_type,spot,node_hours,events,kind,ts FROM spot_observations "
        "WHERE ts >= ? ORDER BY id", (ts,)).fetchall()


def attempts_observed(store, job_id: str) -> set:
    """The attempts of JOB_ID that have an observation."""
    return observed_in(store.db, job_id)


def observed_in(db, job_id: str) -> set:
    """``attempts_observed`` on connection DB (inside a transaction: a claim's view)."""
    return {r[0] for r in db.execute("SELECT attempt FROM spot_observations WHERE job_id=?", (job_id,)).fetchall()}
