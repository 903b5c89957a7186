"""Notifications (``notify:``) sent by ``launcher watch``: exactly once per event, never in
the way of recovery.

Every watch pass (``launcher.recovery.watch.cycle``) ends with ``step``:

1. **Decide** (store work only, fast). A closed job whose spec has ``notify:`` gets its event
   (``completed``, ``failed``, ``gave_up``, ``stopped``, ``cancelled``, ``superseded``: its
   final state); an open job with ``cost.deadline`` gets ``deadline_at_risk`` once it is
   expected to miss it (``deadline_risk``). The decision is taken under the job's claim and
   recorded as one outbox row per (job, event) (``launcher.state.outbox``: ``ON
   CONFLICT DO NOTHING`` on a unique key), so three watchers deciding the same event record it once.
2. **Deliver** on a thread of its own (``Deliverer``), so a slow or failing webhook never
   delays a pass: each due row is leased and its try counted in the same transaction (before
   anything is sent), POSTed within ``notify.timeout`` seconds *in all* (``httppost.post``: a
   receiver that trickles its answer is cut off), and recorded as delivered, or retried on a
   later try with exponential backoff (``backoff``). A row leased by one watcher is never sent
   by another meanwhile. Each request carries ``X-Launcher-Event-Id: <job id>:<event>`` and
   ``X-Launcher-Try: <n>``.

Delivery is **at least once, at most ``max_tries`` POSTs**: a try whose answer was not
recorded (a failure, the deadline, or a watcher that died mid-POST: its lease expires and
``Outbox.reclaim`` releases it) is sent again, with the same ``X-Launcher-Event-Id``, as long as
tries are left; a recorded 2xx is never sent again. ``max_tries: 1`` is at most once.

The webhook: a URL without a token, or ``${NAME}``: the variable NAME of the watcher's
environment holds the URL (a Slack webhook URL *is* a token). The outbox keeps the name only.
A watcher reads NAME only when the operator's rule allows it (``LAUNCHER_ALLOW_NOTIFY_VARS``,
default ``LAUNCHER_NOTIFY_*``), uses its value only when it is an http(s) URL to a host that is
not link-local or a metadata service (``LAUNCHER_ALLOW_LINK_LOCAL_WEBHOOKS=1`` allows those),
and never writes the value anywhere: errors name the variable, or the host.
A job closing with ``tracking.mlflow`` also gets its MLflow run marked FINISHED / FAILED / KILLED
through the same outbox (event ``mlflow_end``), under the same deadline and target rule; the
watcher's MLflow credentials go only to its own ``$MLFLOW_TRACKING_URI``.
"""

from __future__ import annotations

import json
import os
import random
import threading
import time
from pathlib import Path
from typing import Callable, Optional

from launcher.core.errors import LauncherError
from launcher.core.status import FINAL_STATES
from launcher.recovery.httppost import PostError, origin, post
from launcher.recovery.outcome import Outcome
from launcher.spec.integrations import var_refused, webhook_target_problem
from launcher.state.claims import claimed
from launcher.state.outbox import Outbox
from launcher.state.store import NotYours
from launcher.backend.context import AppContext
from launcher.launching.submission import job_spec
from launcher.provenance.trackers import FINAL_STATUS, META_KEY, MlflowRest

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


def unrepeated(what: str, reason: str) -> str:
    """Pure: REASON without a leading "WHAT:" the sentence already says ("gave up: gave up: ..."
    becomes "gave up: ...")."""
    reason = (reason or "").strip()
    head = what.lower() + ":"
    return reason[len(head):].strip() if reason.lower().startswith(head) else reason


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
    said = unrepeated(what, reason)
    text = (f"{EMOJI.get(event, '')} launcher: job *{job.name}* (`{job.job_id}`) {what}"
            + (f": {said}" if said else "")
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
def step(app: AppContext, open_rows=(), clock: Callable[[], float] = time.time, deliver: bool = True) -> list[Outcome]:
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
    try:
        return job_spec(job)
    except LauncherError:
        return None


def decide_closed(app: AppContext, job_id: str, now: float) -> Optional[Outcome]:
    """Under JOB_ID's claim: record the event its closing is (sent when ``notify.on`` names it)."""
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


def decide_deadline(app: AppContext, job_id: str, now: float) -> Optional[Outcome]:
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
    """A try that did not land. FINAL: no later try can do better (a target or a variable the
    operator's rule refuses): the row is undeliverable at once. Messages never quote a URL or
    a variable's value."""

    def __init__(self, message: str, final: bool = False):
        super().__init__(message)
        self.final = final


def resolve_url(sink: dict, environ=None) -> str:
    """The URL SINK's notifications go to: its own, or the value of the variable it names,
    read only when ENVIRON's operator rule allows that name (``var_allowed``) and used only
    when it is an http(s) URL to an allowed host. Errors name the variable, never its value."""
    environ = os.environ if environ is None else environ
    if sink.get("url"):
        url, what = sink["url"], "notify.webhook"
    else:
        name = sink.get("env") or ""
        why = var_refused(name, environ)
        if why:
            raise DeliveryError(f"notify.webhook: {why}; not read", final=True)
        url, what = environ.get(name, ""), name
        if not url.strip():
            raise DeliveryError(f"{name} is not set in the environment of this `launcher watch` (notify.webhook "
                                f"names it)")
    problem = webhook_target_problem(url, environ)
    if problem:  # never the value: it may be anything the variable holds
        raise DeliveryError(f"{what} {problem} (the value is not shown)", final=problem.startswith("points at"))
    return url.strip()


def post_json(url: str, body: dict, timeout: float, headers: Optional[dict] = None, environ=None) -> None:
    """POST BODY as JSON; a 2xx answer within TIMEOUT seconds in all (``httppost.post``) or
    DeliveryError. Messages name the host only: the URL may be a secret."""
    environ = os.environ if environ is None else environ
    try:
        post(url, json.dumps(body).encode(), {"Content-Type": "application/json", **(headers or {})}, timeout,
             environ)
    except PostError as e:
        raise DeliveryError(str(e), final=e.final) from None


def mlflow_headers(tracking_uri: str, environ) -> dict:
    """The watcher's MLflow credentials (``MLFLOW_TRACKING_TOKEN``, or ``_USERNAME`` /
    ``_PASSWORD``) for TRACKING_URI, only when it is the watcher's own tracking server
    (``$MLFLOW_TRACKING_URI``, same scheme, host and port): a job's spec never directs them elsewhere."""
    if origin(tracking_uri) != origin(environ.get("MLFLOW_TRACKING_URI")):
        return {}
    return {k: v for k, v in MlflowRest(tracking_uri, environ=environ).headers.items() if k == "Authorization"}


def send(n, environ=None, try_no: int = 1) -> None:
    """Deliver notification N (an outbox row) once, within its timeout in all; DeliveryError
    when it did not land."""
    environ = os.environ if environ is None else environ
    sink = n.sink
    timeout = float(sink.get("timeout") or 5.0)
    if sink.get("mlflow"):
        m = sink["mlflow"]
        uri = str(m.get("tracking_uri") or "").rstrip("/")
        problem = webhook_target_problem(uri, environ)
        if problem:
            raise DeliveryError(f"tracking.mlflow: the tracking URI {problem}", final=problem.startswith("points at"))
        body = {"run_id": m["run_id"], "status": n.payload.get("status", "FINISHED"),
                "end_time": int(time.time() * 1000)}
        try:
            post(f"{uri}/api/2.0/mlflow/runs/update", json.dumps(body).encode(),
                 {"Content-Type": "application/json", **mlflow_headers(uri, environ)}, timeout, environ)
        except PostError as e:
            raise DeliveryError(f"MLflow {e}", final=e.final) from None
        return
    post_json(resolve_url(sink, environ), n.payload, timeout, environ=environ,
              headers={"X-Launcher-Event-Id": f"{n.job_id}:{n.event}", "X-Launcher-Try": str(try_no)})


def _sink_key(sink: dict) -> str:
    return json.dumps({k: sink.get(k) for k in ("url", "env", "mlflow")}, sort_keys=True, default=str)


def deliver_due(store, now: Optional[float] = None, sender: Callable = send, clock=time.time) -> list[tuple]:
    """Send every due row this process can lease; (id, "delivered" | new state after a failure).
    Tries interrupted by a watcher that died mid-send are released first (``Outbox.reclaim``);
    each try is counted when its lease is taken, before it is sent; after a failed try, the
    other rows for the same webhook wait for the next round (one slow receiver holds a
    round up for one deadline at most)."""
    outbox = Outbox(store)
    owner = store.owner
    out = []
    for n in outbox.reclaim(clock() if now is None else now):
        store.record_event(n.job_id, "notify_failed", notification=n.event, tries=n.tries, error=n.last_error,
                           state=n.state)
        out.append((n.id, n.state))
    failing: set = set()
    for n in outbox.due(clock() if now is None else now):
        key = _sink_key(n.sink)
        if key in failing:
            continue  # its webhook just failed a try: the next round
        timeout = float(n.sink.get("timeout") or 5.0)
        try_no = outbox.lease(n.id, owner, lease_seconds(timeout), clock())
        if not try_no:
            continue  # another watcher is sending it
        try:
            sender(n, try_no=try_no)
        except Exception as e:  # noqa: BLE001 - any failure is retried later
            failing.add(key)
            final = isinstance(e, DeliveryError) and e.final
            # an unexpected error's text is not kept: it may quote the URL
            msg = str(e) if isinstance(e, DeliveryError) else f"{type(e).__name__} (its message is not recorded)"
            state = outbox.failed(n.id, owner, msg, clock() + backoff(try_no), final=final)
            if state:
                store.record_event(n.job_id, "notify_failed", notification=n.event, tries=try_no, error=msg,
                                   state=state)
            out.append((n.id, state or "lost"))
            continue
        if outbox.delivered(n.id, owner, clock()):
            store.record_event(n.job_id, "notified", notification=n.event, tries=try_no)
        out.append((n.id, "delivered"))
    return out


def lease_seconds(timeout: float) -> float:
    """A delivery's lease: well past its deadline (TIMEOUT, in all), so nobody else sends it
    while it may be under way."""
    return max(30.0, timeout + 20.0)


class Deliverer:
    """One thread per process and state store that delivers due rows when woken (each pass)
    and at their retry times; it dies with the process (rows stay in the outbox)."""

    POLL_S = 2.0

    def __init__(self, store):
        self.store = store
        self.wake = threading.Event()
        self.busy = threading.Event()
        self.stopping = threading.Event()
        self.errors: list = []
        self.thread = threading.Thread(target=self._loop, name="launcher-notify", daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        while getattr(self.store, "url", None) or Path(self.store.path).exists():  # a store that is gone (a test's home removed): nothing to send
            self.wake.wait(self.POLL_S)
            self.wake.clear()
            if self.stopping.is_set():  # its store is being closed (``stop``): never touch it again
                return
            self.busy.set()
            try:
                deliver_due(self.store)
            except Exception as e:  # noqa: BLE001 - a busy store: the next wake tries again
                self.errors.append(f"{type(e).__name__}: {e}")
                del self.errors[:-10]
            finally:
                self.busy.clear()


_DELIVERERS: list[Deliverer] = []  # this process's, one per store it delivers for
_LOCK = threading.Lock()


def deliverer_of(store) -> Optional[Deliverer]:
    """This process's deliverer for STORE (the very object: a store opened again gets its own)."""
    return next((d for d in _DELIVERERS if d.store is store), None)


def kick(app: AppContext) -> Deliverer:
    """Wake (or start) this process's deliverer for APP's store."""
    store = app.store
    with _LOCK:
        d = deliverer_of(store)
        if d is None or not d.thread.is_alive():
            _DELIVERERS[:] = [x for x in _DELIVERERS if x.thread.is_alive() and x is not d]
            d = Deliverer(store)
            _DELIVERERS.append(d)
    d.wake.set()
    return d


def stop(store, timeout: float = FLUSH_S) -> None:
    """Before STORE is closed: end this process's deliverer for it, waiting up to TIMEOUT
    seconds for a delivery under way (its row stays leased in the outbox if it outlasts that).
    Closing a store whose connection another thread is using can crash the interpreter."""
    with _LOCK:
        d = deliverer_of(store)
        if d is None:
            return
        _DELIVERERS.remove(d)
    d.stopping.set()
    d.wake.set()
    d.thread.join(timeout)


def pending(app: AppContext) -> bool:
    """Whether notifications wait for a (re)try in APP's store."""
    return Outbox(app.store).next_due() is not None


def flush(app: AppContext, timeout: float = FLUSH_S) -> None:
    """Give deliveries due now up to TIMEOUT seconds to land (``watch`` before it exits)."""
    store = app.store
    d = deliverer_of(store)
    if d is None:
        return
    d.wake.set()
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        time.sleep(0.05)
        if not d.busy.is_set() and not d.wake.is_set() and not Outbox(store).due():
            return
