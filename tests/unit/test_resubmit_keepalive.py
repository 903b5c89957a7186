"""A recovery resubmission slower than the claim's TTL keeps the job's claim (``launch.resubmit``
under ``launcher.state.claims``): no other watcher takes the job over while the submission runs,
and the attempt is then recorded under the claim that made it (not refused as ClaimLost)."""

from __future__ import annotations

import time

from launcher.backend.protocols import Handle
from launcher.launching.launch import launch, resubmit
from launcher.spec.model import JobSpec
from launcher.state.store import StateStore


def test_a_resubmission_slower_than_the_ttl_keeps_the_claim_and_is_recorded(app, monkeypatch):
    monkeypatch.setenv("LAUNCHER_CLAIM_TTL", "0.3")
    spec = JobSpec(name="slow", run="sleep 30")
    job_id = launch(app, spec, "name: slow\nrun: sleep 30\n", None, "local").job_id
    backend = app.backend("local")
    backend.cancel(Handle.from_json(app.store.get_job(job_id).handle))
    c = app.store.claim(job_id, ttl=0.3)
    taken: list = []
    real_submit = backend.submit

    def slow_submit(request):  # a scheduler answering after 4 TTLs; another watcher tries meanwhile
        other = StateStore(app.store.home)
        try:
            for _ in range(8):
                time.sleep(0.15)
                taken.append(other.claim(job_id, ttl=0.3, owner="another-watcher") is not None)
        finally:
            other.close()
        return real_submit(request)

    monkeypatch.setattr(backend, "submit", slow_submit)
    h = resubmit(app, app.store.get_job(job_id), "local", 2, "test", owner=c.owner)
    assert taken == [False] * 8
    assert [a.attempt for a in app.store.attempts(job_id)] == [1, 2] and h.attempt == 2
    assert app.store.claim_holder(job_id)[0] == c.owner
    backend.cancel(h)
