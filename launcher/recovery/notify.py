"""Notifications (``notify:``) sent by ``launcher watch``: exactly once per event, never in
the way of recovery.

Every watch pass (``launcher.recovery.watch.cycle``) ends with ``step``:

1. **Decide** (store work only, fast). A closed job whose spec has ``notify:`` gets its event
   (``completed``, ``failed``, ``gave_up``, ``stopped``, ``cancelled``, ``superseded``: its
   final state); an open job with ``cost.deadline`` gets ``deadline_at_risk`` once it is
   expected to miss it (``deadline_risk``). The decision is taken under the job's claim and
   recorded as one outbox row per (job, event) (``launcher.state.outbox``: ``INSERT OR
   IGNORE`` on a unique key), so three watchers deciding the same event record it once.
2. **Deliver** on a thread of its own (``Deliverer``), so a slow or failing webhook never
   delays a pass: each due row is leased, POSTed with a bounded timeout and recorded as
   delivered, or retried on a later try with exponential backoff (``backoff``), up to
   ``notify.max_tries``. A row leased by one watcher is never sent by another meanwhile. Each
   request carries ``X-Launcher-Event-Id: <job id>:<event>`` for a receiver that dedupes.

The webhook: a URL without a token, or ``${NAME}``: the variable NAME of the watcher's
environment holds the URL (a Slack webhook URL *is* a token). The outbox keeps the name only.
A job closing with ``tracking.mlflow`` also gets its MLflow run marked FINISHED / FAILED / KILLED
through the same outbox (event ``mlflow_end``).
"""

from __future__ import annotations

import json
import os
import random
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Callable, Optional
from urllib.parse import urlsplit

from launcher.core.errors import LauncherError
from launcher.core.status import FINAL_STATES
from launcher.recovery.outcome import Outcome
from launcher.state.claims import claimed
from launcher.state.outbox import Outbox
from launcher.state.store import NotYours

EVENT_OF_STATE = {"COMPLETED": "completed", "FAILED": "failed", "GAVE_UP": "gave_up", "STOPPED": "stopped",
                  "CANCELLED": "cancelled", "SUPERSEDED": "superseded"}
AT_RISK_FRACTION = 0.9  # with no runtime estimate: at risk once 90% of the deadline has passed
MLFLOW_END = "mlflow_end"
EMOJI = {"completed": ":white_check_mark:", "failed": ":x:", "gave_up": ":x:", "stopped": ":octagonal_sign:",
         "cancelled": ":no_entry_sign:", "superseded": ":arrows_counterclockwise:",
         "deadline_at_risk": ":hourglass_flowing_sand:"}
FLUSH_S = 10.0  # how long `watch` waits at exit for deliveries under way


# ---------------------------------------------------------------- pure rules
def deadline_risk(created: float, deadline_s: Optional[float], expected_s: Optional[float], ran_s: float,
                  now: float) -> str:
    """Why a job launched at CREATED with ``cost.deadline`` DEADLINE_S is at risk ("" when it is
    not): the time left to the deadline is shorter than the work left (``expected_runtime``
    minus RAN_S, the time its attempts have run), or, with no estimate, less than
    1 - AT_RISK_FRACTION of the deadline is left."""
    if not deadline_s:
        return ""
    left = created + deadline_s - now
    if expected_s:
        need = max(0.0, expected_s - ran_s)
        if need > left:
            return (f"{_hours(need)} of expected work left ({_hours(ran_s)} of {_hours(expected_s)} run) and "
                    f"{_hours(max(left, 0))} to the deadline")
        return ""
    if left < (1 - AT_RISK_FRACTION) * deadline_s:
        return f"{_hours(max(left, 0))} left of a {_hours(deadline_s)} deadline and the job is still open"
    return ""


def _hours(s: float) -> str:
    return f"{s / 3600:.1f} h" if s >= 3600 else f"{s / 60:.0f} min"


def backoff(tries: int, rng: Callable[[], float] = random.random) -> float:
    """Seconds before try TRIES+1: 2, 4, 8 ... capped at 300, with up to 25% jitter."""
    return min(300.0, 2.0 ** max(1, tries)) * (1 + 0.25 * rng())


def ran_seconds(attempts, now: float) -> float:
    return sum(max(0.0, (a.ended or now) - a.started) for a in attempts if a.started)


def payload(event: str, job, fmt: str, reason: str, attempts: list, now: float) -> dict:
    """The body of one notification: Slack's incoming-webhook shape (``text``), or plain JSON."""
    sweep = (job.meta.get("sweep") or {}).get("id")
    cost = sum(a.cost_usd or 0.0 for a in attempts)
    info = {"id": f"{job.job_id}:{event}", "event": event, "job_id": job.job_id, "name": job.name,
            "state": job.state, "reason": reason, "target": job.target, "attempts": len(attempts),
            "last_step": job.last_step, "cost_usd": round(cost, 4) if cost else None, "sweep_id": sweep, "ts": now}
    if fmt == "json":
        return info
    what = event.replace("_", " ")
    text = (f"{EMOJI.get(event, '')} launcher: job *{job.name}* (`{job.job_id}`) {what}"
            + (f": {reason}" if reason else "")
            + f"\n{len(attempts)} attempt{'s' if len(attempts) != 1 else ''} on target `{job.target}`"
            + (f", last step {job.last_step}" if job.last_step is not None else "")
            + (f", ${cost:.2f}" if cost else "") + (f", sweep `{sweep}`" if sweep else ""))
    return {"text": text.strip()}


def sink_of(notify) -> dict:
    """What the outbox keeps of ``notify:``: the URL when it carries no token, else the NAME of
    the variable that holds it; never a secret value."""
    name = notify.webhook_env
    out = {"env": name} if name else {"url": notify.webhook}
    out.update(format=notify.format, timeout=notify.timeout)
    return out


# ---------------------------------------------------------------- deciding
def step(app, open_rows=(), clock: Callable[[], float] = time.time, deliver: bool = True) -> list[Outcome]:
    """A watch pass's notifications: decide what closed or is at risk, then wake the deliverer."""
    store = app.store
    outbox = Outbox(store)
    out = []
    for job_id in outbox.closed_unnoticed():
        try:
            o = decide_closed(app, job_id, clock())
        except NotYours:  # another person's job on a team's store: theirs and the team watcher's to decide
            continue
        except LauncherError as e:
            o = Outcome(job_id, "notify_error", str(e))
        if o is not None:
            out.append(o)
    for row in open_rows:
        if "deadline" not in row.spec_yaml or "notify" not in row.spec_yaml:
            continue
        try:
            o = decide_deadline(app, row.job_id, clock())
        except LauncherError as e:
            o = Outcome(row.job_id, "notify_error", str(e))
        if o is not None:
            out.append(o)
    if deliver:
        kick(app)
    return out


def _spec(job):
    # only when a job notifies or tracks: kept off the plain watch pass
    from launcher.launching.submission import job_spec

    try:
        return job_spec(job)
    except LauncherError:
        return None


def decide_closed(app, job_id: str, now: float) -> Optional[Outcome]:
    """Under JOB_ID's claim: record the event its closing is (sent when ``notify.on`` names it)."""
    # only when a job notifies or tracks: kept off the plain watch pass
    from launcher.provenance.trackers import FINAL_STATUS, META_KEY

    store = app.store
    outbox = Outbox(store)
    with claimed(store, job_id) as c:
        if c is None:
            return None  # another watcher is deciding on it: next pass
        job = c.job
        if job.state not in FINAL_STATES:
            return None
        event = EVENT_OF_STATE.get(job.state, job.state.lower())
        spec = _spec(job)
        notify = spec.notify if spec is not None else None
        mlflow = (job.meta.get(META_KEY) or {}).get("mlflow")
        if mlflow:  # the MLflow run ends with the job (delivered like a notification, with retries)
            outbox.decide(job_id, MLFLOW_END, send=True, final=False, now=now,
                          sink={"mlflow": {"run_id": mlflow["run_id"], "tracking_uri": mlflow["tracking_uri"]},
                                "timeout": 10.0},
                          payload={"status": FINAL_STATUS.get(job.state, "FINISHED")})
        send = notify is not None and event in notify.on
        recorded = outbox.decide(job_id, event, send=send, final=True, now=now,
                                 sink=sink_of(notify) if send else {},
                                 payload=payload(event, job, notify.format, job.reason, c.attempts, now)
                                 if send else {}, max_tries=notify.max_tries if send else 1)
    if recorded and send:
        store.record_event(job_id, "notify_queued", notification=event)
        return Outcome(job_id, "notify", f"{event} queued")
    return None


def decide_deadline(app, job_id: str, now: float) -> Optional[Outcome]:
    store = app.store
    outbox = Outbox(store)
    if outbox.has(job_id, "deadline_at_risk"):
        return None
    with claimed(store, job_id) as c:
        if c is None:
            return None
        job = c.job
        spec = _spec(job)
        if spec is None or spec.notify is None or "deadline_at_risk" not in spec.notify.on:
            return None
        why = deadline_risk(job.created, spec.cost.deadline, spec.resources.expected_runtime,
                            ran_seconds(c.attempts, now), now)
        if not why:
            return None
        recorded = outbox.decide(job_id, "deadline_at_risk", send=True, final=False, now=now,
                                 sink=sink_of(spec.notify), max_tries=spec.notify.max_tries,
                                 payload=payload("deadline_at_risk", job, spec.notify.format, why, c.attempts, now))
    if recorded:
        store.record_event(job_id, "notify_queued", notification="deadline_at_risk", reason=why)
        return Outcome(job_id, "notify", f"deadline_at_risk queued: {why}")
    return None


# ---------------------------------------------------------------- delivering
class DeliveryError(Exception):
    pass


def resolve_url(sink: dict, environ=None) -> str:
    environ = os.environ if environ is None else environ
    if sink.get("url"):
        return sink["url"]
    name = sink.get("env")
    url = environ.get(name or "", "")
    if not url:
        raise DeliveryError(f"{name} is not set in the environment of this `launcher watch` (notify.webhook "
                            f"names it)")
    return url


def post_json(url: str, body: dict, timeout: float, headers: Optional[dict] = None) -> None:
    """POST BODY as JSON; a 2xx answer within TIMEOUT or DeliveryError. Messages name the
    host only: the URL may be a secret."""
    host = urlsplit(url).netloc.rpartition("@")[2] or "?"
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:  # noqa: S310 - http(s) only (spec check)
            r.read(65536)
    except urllib.error.HTTPError as e:
        raise DeliveryError(f"{host} answered HTTP {e.code}") from None
    except (urllib.error.URLError, OSError) as e:
        raise DeliveryError(f"{host}: {type(getattr(e, 'reason', e)).__name__}: "
                            f"{str(getattr(e, 'reason', e))[:120]}") from None


def send(n, environ=None) -> None:
    """Deliver notification N (an outbox row) once; DeliveryError when it did not land."""
    sink = n.sink
    timeout = float(sink.get("timeout") or 5.0)
    if sink.get("mlflow"):
        # only when a job notifies or tracks: kept off the plain watch pass
        from launcher.provenance.trackers import MlflowRest, TrackerError

        m = sink["mlflow"]
        try:
            MlflowRest(m["tracking_uri"], timeout=timeout, environ=environ).set_terminated(
                m["run_id"], n.payload.get("status", "FINISHED"))
        except TrackerError as e:
            raise DeliveryError(str(e)) from None
        return
    post_json(resolve_url(sink, environ), n.payload, timeout, headers={"X-Launcher-Event-Id": f"{n.job_id}:{n.event}"})


def deliver_due(store, now: Optional[float] = None, sender: Callable = send, clock=time.time) -> list[tuple]:
    """Send every due row this process can lease; (id, "delivered" | new state after a failure)."""
    outbox = Outbox(store)
    owner = store.owner
    out = []
    for n in outbox.due(clock() if now is None else now):
        timeout = float(n.sink.get("timeout") or 5.0)
        if not outbox.lease(n.id, owner, lease_seconds(timeout), clock()):
            continue  # another watcher is sending it
        try:
            sender(n)
        except Exception as e:  # noqa: BLE001 - any failure is retried later
            msg = str(e) if isinstance(e, DeliveryError) else f"{type(e).__name__}: {e}"
            state = outbox.failed(n.id, owner, msg, clock() + backoff(n.tries + 1))
            if state:
                store.record_event(n.job_id, "notify_failed", notification=n.event, tries=n.tries + 1, error=msg,
                                   state=state)
            out.append((n.id, state or "lost"))
            continue
        if outbox.delivered(n.id, owner, clock()):
            store.record_event(n.job_id, "notified", notification=n.event, tries=n.tries + 1)
        out.append((n.id, "delivered"))
    return out


def lease_seconds(timeout: float) -> float:
    """A delivery's lease: well past its timeout, so nobody else sends it while it may be under way."""
    return max(30.0, 4 * timeout)


class Deliverer:
    """One thread per process and state store that delivers due rows when woken (each pass)
    and at their retry times; it dies with the process (rows stay in the outbox)."""

    POLL_S = 2.0

    def __init__(self, store):
        self.store = store
        self.wake = threading.Event()
        self.busy = threading.Event()
        self.errors: list = []
        self.thread = threading.Thread(target=self._loop, name="launcher-notify", daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        while getattr(self.store, "url", None) or Path(self.store.path).exists():  # a store that is gone (a test's home removed): nothing to send
            self.wake.wait(self.POLL_S)
            self.wake.clear()
            self.busy.set()
            try:
                deliver_due(self.store)
            except Exception as e:  # noqa: BLE001 - a busy store: the next wake tries again
                self.errors.append(f"{type(e).__name__}: {e}")
                del self.errors[:-10]
            finally:
                self.busy.clear()


_DELIVERERS: dict = {}
_LOCK = threading.Lock()


def kick(app) -> Deliverer:
    """Wake (or start) this process's deliverer for APP's store."""
    store = app.store
    with _LOCK:
        d = _DELIVERERS.get(id(store))
        if d is None or not d.thread.is_alive() or d.store is not store:
            d = _DELIVERERS[id(store)] = Deliverer(store)
    d.wake.set()
    return d


def pending(app) -> bool:
    """Whether notifications wait for a (re)try in APP's store."""
    return Outbox(app.store).next_due() is not None


def flush(app, timeout: float = FLUSH_S) -> None:
    """Give deliveries due now up to TIMEOUT seconds to land (``watch`` before it exits)."""
    store = app.store
    d = _DELIVERERS.get(id(store))
    if d is None:
        return
    d.wake.set()
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        time.sleep(0.05)
        if not d.busy.is_set() and not d.wake.is_set() and not Outbox(store).due():
            return
