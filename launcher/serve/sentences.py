"""A job's events as sentences for the web view ("Will retry in 30 s: preempted by the
scheduler."), not raw JSON. Pure: an event dict (``StateStore.events``: "ts", "kind" and its
detail) in, plain text out (the page escapes it). A kind without a sentence of its own, or one
whose detail lacks a word the sentence needs, reads as its kind in words and its detail as
"key: value" pairs, so a new event kind is never hidden. Who wrote an event ends its sentence."""

from __future__ import annotations

import json
from string import Formatter

# kind -> sentence over the event's detail ({name} fields; a missing one: the generic form)
SENTENCES = {
    "submitted": "Attempt {attempt} submitted to {target} as {native_id}.",
    "resubmitted": "Attempt {attempt} resubmitted to {target} as {native_id}.",
    "retry_scheduled": "Will retry in {delay_s} s: {reason}.",
    "control_plane": "The scheduler could not be asked: {error}.",
    "storage_timeout": "The checkpoint storage did not answer: {error}.",
    "watch_error": "The watcher hit an error: {error}.",
    "adopted": "Adopted attempt {attempt} ({native_id}), found by its dedupe token: {reason}.",
    "cancelled_in_flight": "Cancelled submission {native_id}, which was in flight when the job was cancelled.",
    "cancel_failed": "A cancel did not go through: {errors}.",
    "duplicate_cancelled": "Cancelled {native_id}, a duplicate submission of attempt {attempt}.",
    "duplicate_cancel_failed": "Could not cancel {native_id}, a duplicate submission of attempt {attempt}: {error}.",
    "restarted": "The scheduler restarted it in place (attempt {attempt}).",
    "burst": "Burst to {to}: {reason}.",
    "burst_failed": "Could not burst to {target}: {error}.",
    "burst_moved": "Moved to {to}; cancelled {cancelled_native_id}.",
    "burst_won": "{winner} started first; cancelled the copy on {cancelled}.",
    "burst_abandoned": "Gave up the cloud copy: {reason}.",
    "notify_queued": "Notification \u201c{notification}\u201d queued.",
    "notified": "Notification \u201c{notification}\u201d sent (try {tries}).",
    "notify_failed": "Notification \u201c{notification}\u201d failed (try {tries}): {error}.",
    "deadline_move_failed": "Could not move to {to} to meet the deadline: {error}.",
    "job_dir_elsewhere": "Its job folder is {using} (it was launched from {launched_from}).",
    "fresh": "Started fresh (seed {seed}, checkpoints under {root}).",
    "resumes": "Continues run {run} from step {step} ({path}).",
    "provenance": "Provenance recorded at {run_json}.",
    "provenance_error": "Provenance not recorded: {error}.",
    "done": "Ended: {reason}.",
    "attempt_ended": "Attempt {attempt} seen ended: {state}.",
    "submit_outcome_unknown": "Whether the submission went through is not known: {reason}.",
}
_FIELDS = {k: {f for _, f, _, _ in Formatter().parse(v) if f} for k, v in SENTENCES.items()}


def _word(v) -> str:
    if isinstance(v, str):
        return v
    if isinstance(v, (list, tuple)):
        return "; ".join(_word(x) for x in v) or "none"
    if isinstance(v, dict):
        return ", ".join(f"{k} {_word(x)}" for k, x in v.items()) or "none"
    if isinstance(v, float):
        return f"{v:g}"
    return json.dumps(v, default=str) if v is not None else "none"


def sentence(event: dict) -> str:
    """EVENT as one sentence, then who wrote it when the store recorded that ("By alice.": its
    ``actor``, the role on a team's store, the OS user on SQLite: ``launcher.state.actors``)."""
    text = _sentence({k: v for k, v in event.items() if k != "actor"})
    return text + f" By {event['actor']}." if event.get("actor") else text


def _sentence(event: dict) -> str:
    kind = str(event.get("kind") or "event")
    detail = {k: v for k, v in event.items() if k not in ("ts", "kind")}
    text = SENTENCES.get(kind)
    if text is not None and _FIELDS[kind] <= {k for k, v in detail.items() if v not in (None, "")}:
        out = text.format(**{k: _word(v) for k, v in detail.items()})
        extra = {k: v for k, v in detail.items() if k not in _FIELDS[kind] and v not in (None, "", [], {})}
        return out if not extra else out + " (" + "; ".join(f"{k.replace('_', ' ')}: {_word(v)}"
                                                              for k, v in extra.items()) + ")"
    words = kind.replace("_", " ")
    head = words[:1].upper() + words[1:]
    parts = [f"{k.replace('_', ' ')}: {_word(v)}" for k, v in detail.items() if v not in (None, "", [], {})]
    return head + ("." if not parts else ": " + "; ".join(parts) + ".")
