"""Cancelling many SkyPilot jobs in a few API calls (``SkyPilotBackend.cancel_many``).

A sweep's elements are separate clusters (or managed jobs). Cancelling them one by one waits
for each teardown in turn; here the launch requests still provisioning are cancelled in one
call (else a launch would bring its cluster up after the down), then every teardown and
managed-job cancel is fired before any is waited for, so they run side by side on the API
server. Idempotent like ``cancel``: a cluster already gone is no error.
"""

from __future__ import annotations

from typing import Sequence

from launcher.backend.protocols import Handle
from launcher.core.errors import LauncherError

from launcher_backends.skypilot.client import SkyClient, short_error


def job_name(h: Handle) -> str:
    """What SkyPilot knows the job by: a managed job's task name, else its cluster's name."""
    return (h.extra.get("task_name") or h.native_id) if h.extra.get("managed") else h.native_id


def cancel_many(client: SkyClient, handles: Sequence[Handle]) -> dict:
    """{native id: error} of the HANDLES whose cancel did not go through. An API server that
    cannot be reached fails every one of them; the launcher's own errors (SkyPilot missing)
    are raised."""
    handles = list(handles)
    try:
        client.cancel_requests([h.extra["request_id"] for h in handles if h.extra.get("request_id")])
        managed = [h for h in handles if h.extra.get("managed")]
        plain = [h for h in handles if not h.extra.get("managed")]
        failed = {**(client.jobs_cancel_many([job_name(h) for h in managed]) if managed else {}),
                  **(client.down_many([job_name(h) for h in plain]) if plain else {})}
    except LauncherError:
        raise
    except Exception as e:  # noqa: BLE001 - the API server as a whole: every cancel failed
        return {h.native_id: short_error(e) for h in handles}
    return {h.native_id: failed[job_name(h)] for h in handles if job_name(h) in failed}
