"""`launcher serve`'s part of a team's names (issue 33, item 2): the list page shows when each row
last changed, and an open row (as stored: the view never refreshes) how long ago; each event's
sentence ends with who wrote it; over a real store served by the real server, the events carry
their actor and the list its owner."""

from __future__ import annotations

import json

from tests.fixtures.serving import get, served


def _row(jid, **kw):
    d = {"job_id": jid, "name": "n", "target": "local", "backend": "local", "state": "RUNNING", "reason": "",
         "owner": "ann", "open": True, "created": 0.0, "updated": 1000.0, "now": 1000.0 + 3 * 3600,
         "duration_s": 61.0, "region": None, "resources": {}, "attempts": 1, "last_step": 7, "cost_usd": 0.5,
         "cost_complete": True, "sweep": None, "element": None}
    d.update(kw)
    return d


def test_an_open_row_says_how_long_ago_it_last_changed_and_an_ended_one_only_when():
    from launcher.serve.pages import JOB_COLUMNS, jobs_body

    page = {"total": 2, "all": 2, "counts": {}, "where": {}, "page": 1, "pages": 1, "per_page": 500,
            "jobs": [_row("a"), _row("b", state="COMPLETED", open=False)], "sweeps": [], "unreadable": {},
            "exists": True}
    html = jobs_body(page)
    assert "<th>changed</th>" in html and JOB_COLUMNS.index("changed") == JOB_COLUMNS.index("step") + 1
    row_a = html.split('data-job="a"')[1].split("</tr>")[0]
    row_b = html.split('data-job="b"')[1].split("</tr>")[0]
    assert '<small class="muted age">3.0 h ago</small>' in row_a and "as stored" in row_a
    assert "ago" not in row_b and "1970-01-01 00:16:40 UTC" in row_b
    assert row_a.count("<td") == row_b.count("<td") == len(JOB_COLUMNS)


def test_an_events_sentence_ends_with_who_wrote_it():
    from launcher.serve.sentences import sentence

    assert sentence({"kind": "done", "reason": "completed", "actor": "watcher"}) == "Ended: completed. By watcher."
    assert sentence({"kind": "done", "reason": "completed"}) == "Ended: completed."


def test_the_served_store_gives_each_job_its_owner_and_each_event_its_actor(launcher_env):
    from launcher.state.actors import file_owner
    from launcher.state.store import StateStore
    from launcher.state.watchers import user_name

    home = launcher_env["home"]
    store = StateStore(home)
    try:
        store.begin_job("j-1", "n", "local", "local", None, "run: x\n")
        store.close_job("j-1", "CANCELLED", f"cancelled by {user_name()}", event="cancelled",
                        detail={"by": user_name()})
        owner = file_owner(store.path)
    finally:
        store.close()
    with served(home) as (url, _):
        d = json.loads(get(url + "/api/jobs")[2])
        assert [(j["job_id"], j["owner"]) for j in d["jobs"]] == [("j-1", owner)]
        job = json.loads(get(url + "/api/job/j-1")[2])
        assert [(e["kind"], e["actor"]) for e in job["events"]] == [("cancelled", user_name())]
        assert job["refreshed"] is False  # a view shows the store as it is
        assert f"By {user_name()}." in get(url + "/job/j-1")[2]
