"""`launcher serve`: the read-only web view (issue 24, §4). Its pages over a real state store,
served by the real server on 127.0.0.1: what they show, that hostile fields render as text,
that the store is never written however many requests come, and the token rules.
(tests/integration/test_serve_browser.py drives it in a real Chromium.)"""

from __future__ import annotations

import hashlib
import json
import os
import time

import pytest
from click.testing import CliRunner

from tests.fixtures.serving import get, served

TOKEN = "t0ken-Abcdefghijklmnop"
HOSTILE_NAME = '<script>window.PWNED=1</script><img src=x onerror="window.PWNED=2">"\'&amp;'
HOSTILE_REASON = '"><svg onload=alert(1)></svg><!-- </td></tr></table> -->'
HANDLE = json.dumps({"backend": "local", "native_id": "n", "extra": {}})


def fill(home, n=3, name="train", reason="", sweep=None):
    """N jobs (a RUNNING one first, then COMPLETED ones after a preemption), closed store."""
    from launcher.state.store import StateStore

    s = StateStore(home)
    ids = []
    for i in range(n):
        jid = f"{'job' if sweep is None else sweep}-{i:05d}"
        s.begin_job(jid, name, "local", "local", None, "name: x\nrun: 'true'\n")
        s.record_submission(jid, 1, "local", HANDLE, f"n{i}", state="RUNNING" if i == 0 else "PREEMPTED")
        s.update_attempt(jid, 1, cost_usd=0.25, started=time.time() - 60, ended=None if i == 0 else time.time() - 30)
        if i:
            s.record_submission(jid, 2, "local", HANDLE, f"m{i}", state="COMPLETED", resume_step=10)
            s.update_attempt(jid, 2, cost_usd=0.5, started=time.time() - 20, ended=time.time() - 1)
            s.close_job(jid, "COMPLETED", reason)
        ids.append(jid)
    s.close()
    return ids


def test_the_jobs_page_shows_state_target_attempts_and_cost(launcher_env):
    ids = fill(launcher_env["home"])
    with served(launcher_env["home"]) as (url, _):
        status, headers, body = get(url + "/")
        assert status == 200 and headers["Content-Type"].startswith("text/html")
        assert "default-src 'none'" in headers["Content-Security-Policy"]
        for jid in ids:
            assert f'data-job="{jid}"' in body and f'href="/job/{jid}"' in body
        row = body.split(f'data-job="{ids[1]}"')[1].split("</tr>")[0]
        assert "COMPLETED" in row and ">local<" in row and '<td class="num">2</td>' in row and "$0.7500" in row
        assert "RUNNING" in body.split(f'data-job="{ids[0]}"')[1].split("</tr>")[0]
        status, _, text = get(url + "/api/jobs")
        d = json.loads(text)
        assert status == 200 and d["total"] == 3 and {j["job_id"]: j["attempts"] for j in d["jobs"]} == \
            {ids[0]: 1, ids[1]: 2, ids[2]: 2}
        assert get(url + "/static/refresh.js")[0] == 200 and get(url + "/static/style.css")[0] == 200


def test_a_row_with_a_damaged_meta_is_named_not_shown(launcher_env):
    import sqlite3

    ids = fill(launcher_env["home"], n=3)
    db = sqlite3.connect(launcher_env["home"] / "state.db")
    db.execute("UPDATE jobs SET meta='[1]' WHERE job_id=?", (ids[1],))
    db.execute("UPDATE jobs SET meta='{oops' WHERE job_id=?", (ids[2],))
    db.commit()
    db.close()
    with served(launcher_env["home"]) as (url, _):
        d = json.loads(get(url + "/api/jobs")[2])
        assert [j["job_id"] for j in d["jobs"]] == [ids[0]] and d["jobs"][0]["open"]
        assert "not a JSON object" in d["unreadable"][ids[1]] and "not valid JSON" in d["unreadable"][ids[2]]
        assert f"{ids[2]}: not shown" in get(url + "/")[2]


def test_the_jobs_page_is_paginated(launcher_env):
    fill(launcher_env["home"], n=7)
    with served(launcher_env["home"]) as (url, _):
        d = json.loads(get(url + "/api/jobs?page=2&per=3")[2])
        assert (d["total"], d["pages"], d["page"], len(d["jobs"])) == (7, 3, 2, 3)
        body = get(url + "/?page=3&per=3")[2]
        assert body.count("data-job=") == 1 and 'href="/?page=1&amp;per=3"' in body


def test_one_job_shows_its_attempts_timeline_and_goodput(launcher_env):
    ids = fill(launcher_env["home"])
    with served(launcher_env["home"]) as (url, _):
        status, _, body = get(url + f"/job/{ids[1]}")
        assert status == 200
        assert '<table id="attempts">' in body and body.count("PREEMPTED") >= 1 and "COMPLETED" in body
        assert '<svg class="timeline"' in body and 'id="goodput"' in body and 'data-category="useful_compute"' in body
        d = json.loads(get(url + f"/api/job/{ids[1]}")[2])
        assert [a["state"] for a in d["attempts"]] == ["PREEMPTED", "COMPLETED"]
        assert d["report"]["job_id"] == ids[1] and len(d["report"]["attempts"]) == 2
        status, _, body = get(url + "/job/no-such-job")
        assert status == 404 and "no job" in body


def test_a_hostile_job_name_and_reason_render_as_text_not_markup(launcher_env):
    ids = fill(launcher_env["home"], name=HOSTILE_NAME, reason=HOSTILE_REASON)
    from html import escape

    with served(launcher_env["home"]) as (url, _):
        for page in ("/", f"/job/{ids[1]}"):
            body = get(url + page)[2]
            assert escape(HOSTILE_NAME, quote=True) in body, page
            assert escape(HOSTILE_REASON, quote=True) in body, page
            for raw in ("<script>window", "<img src=x", "<svg onload", "<!-- </td>"):
                assert raw not in body, (page, raw)
        assert json.loads(get(url + "/api/jobs")[2])["jobs"][0]["name"] == HOSTILE_NAME


def test_a_hostile_job_id_in_the_address_is_escaped(launcher_env):
    fill(launcher_env["home"], n=1)
    with served(launcher_env["home"]) as (url, _):
        status, _, body = get(url + "/job/%3Cscript%3Ealert(1)%3C%2Fscript%3E")
        assert status == 404 and "<script>alert" not in body and "&lt;script&gt;alert(1)" in body


def _fingerprint(path):
    st = os.stat(path)
    return hashlib.sha256(path.read_bytes()).hexdigest(), st.st_mtime_ns, st.st_size


def test_many_requests_never_write_the_store(launcher_env):
    home = launcher_env["home"]
    ids = fill(home, n=5)
    from launcher.state.store import StateStore

    s = StateStore(home)  # a SUBMITTING row (what `launcher status` would reconcile, a write) and events
    s.begin_job("limbo-1", "limbo", "local", "local", None, "name: x\nrun: 'true'\n")
    s.record_event(ids[0], "note", detail="x")
    s.sweeps.begin("sw-1", "sw", "local", "local", None, "name: sw\nrun: 'true'\nsweep: {grid: {lr: [1, 2]}}\n",
                   {}, [(f"sw-1-e{i}", None, {"sweep": {"id": "sw-1", "index": i, "size": 2, "params": {"lr": i}}})
                        for i in range(2)])  # its elements SUBMITTING, open: a sweep status would refresh them
    s.close()
    db = home / "state.db"
    before = _fingerprint(db)
    wal = home / "state.db-wal"
    with served(home) as (url, _):
        for i in range(40):
            for page in ("/", "/api/jobs", f"/job/{ids[i % 5]}", f"/api/job/{ids[i % 5]}", "/job/limbo-1",
                         "/job/nope", "/sweep/nope", "/?page=2&per=2", "/sweep/sw-1", "/api/sweep/sw-1",
                         "/job/sw-1-e0", "/job/sw-1"):
                assert get(url + page)[0] in ((404,) if "nope" in page else (200, 302)), page
            assert get(url + "/", method="POST")[0] == 405
    assert _fingerprint(db) == before
    assert not wal.exists() or wal.stat().st_size == 0  # nothing was written to the WAL either
    s = StateStore(home)
    try:
        assert s.get_job("limbo-1").state == "SUBMITTING" and s.get_job("sw-1-e1").state == "SUBMITTING"
    finally:
        s.close()


def test_the_read_only_store_refuses_every_write(launcher_env):
    from launcher.state.readonly import ReadOnly, ReadOnlyStore
    from launcher.core.errors import StateStoreError

    ids = fill(launcher_env["home"], n=1)
    ro = ReadOnlyStore(launcher_env["home"])
    try:
        assert ro.get_job(ids[0]).job_id == ids[0]
        with pytest.raises(ReadOnly):
            ro.record_event(ids[0], "x")
        with pytest.raises(ReadOnly):
            ro.close_job(ids[0], "FAILED", "x")
        with pytest.raises(StateStoreError, match="read-only"):  # SQLite itself refuses, under any method
            ro.db.execute("DELETE FROM events")
    finally:
        ro.close()


def test_a_missing_store_is_not_created(launcher_env):
    home = launcher_env["home"]
    with served(home) as (url, _):
        status, _, body = get(url + "/")
        assert status == 200 and "no state store" in body
    assert not (home / "state.db").exists()


def test_loopback_without_token_refuses_another_host_name(launcher_env):
    fill(launcher_env["home"], n=1)
    with served(launcher_env["home"]) as (url, _):
        assert get(url + "/", headers={"Host": "evil.example:80"})[0] == 403
        assert get(url + "/", headers={"Host": "localhost:1"})[0] == 200


def test_a_token_is_required_and_never_logged(launcher_env):
    fill(launcher_env["home"], n=1)
    with served(launcher_env["home"], token=TOKEN) as (url, log):
        assert get(url + "/")[0] == 401
        assert get(url + "/api/jobs")[0] == 401
        assert get(url + "/", headers={"Authorization": "Bearer wrong-token-xxxxxxxxxx"})[0] == 401
        assert get(url + "/?token=wrong-token-xxxxxxxxxx")[0] == 401
        assert get(url + "/api/jobs", headers={"Authorization": f"Bearer {TOKEN}"})[0] == 200
        status, headers, _ = get(url + f"/?page=1&token={TOKEN}")
        assert status == 303 and headers["Location"] == "/?page=1" and "HttpOnly" in headers["Set-Cookie"]
        cookie = headers["Set-Cookie"].split(";")[0]
        assert get(url + "/", headers={"Cookie": cookie})[0] == 200
        assert get(url + "/healthz")[0] == 200
    assert log and all(TOKEN not in line for line in log)
    assert any("/?page" not in line and " / 303" in line for line in log)


def test_cli_refuses_a_non_loopback_address_without_a_token(launcher_env, monkeypatch):
    from launcher.cli import main

    monkeypatch.delenv("LAUNCHER_SERVE_TOKEN", raising=False)
    r = CliRunner().invoke(main, ["serve", "--host", "0.0.0.0"])
    assert r.exit_code == 2 and r.output.count("\n") == 1 and "--token" in r.output, r.output
    r = CliRunner().invoke(main, ["serve", "--host", "0.0.0.0", "--token", "short"])
    assert r.exit_code == 2 and "16 characters" in r.output
    assert not (launcher_env["home"] / "state.db").exists()


def test_is_loopback():
    from launcher.serve.server import host_of, is_loopback

    assert all(is_loopback(h) for h in ("127.0.0.1", "127.1.2.3", "localhost", "::1", "[::1]"))
    assert not any(is_loopback(h) for h in ("0.0.0.0", "::", "10.0.0.1", "example.com", ""))
    assert [host_of(h) for h in ("127.0.0.1:80", "[::1]:8765", "localhost")] == ["127.0.0.1", "::1", "localhost"]


WRITER = """
import sys, json
from launcher.state.store import StateStore
s = StateStore(sys.argv[1])
for j in sys.argv[2:]:
    s.begin_job(j, "w", "local", "local", None, "name: x\\nrun: 'true'\\n")
s.close()
"""


def test_pages_follow_what_other_processes_write(launcher_env):
    """Each request reads the store as it is now: writers in other processes (launch, watch)
    that open, write and close between requests are all seen."""
    import subprocess
    import sys

    home = launcher_env["home"]
    fill(home, n=1)
    with served(home) as (url, _):
        for i in range(12):
            for _ in range(3):
                assert get(url + "/api/jobs")[0] == 200
                get(url + "/api/job/job-00000")
            subprocess.run([sys.executable, "-c", WRITER, str(home), f"w-{i}"], check=True)
            got = {json.loads(get(url + "/api/jobs")[2])["total"] for _ in range(6)}
            assert got == {i + 2}, (i, got)


def test_the_job_page_says_which_tier_each_attempt_resumed_from(launcher_env):
    from launcher.api.readview import ReadView
    from launcher.serve.pages import job_page
    from launcher.state.store import StateStore

    ids = fill(launcher_env["home"])
    s = StateStore(launcher_env["home"])
    s.write_progress(ids[1], None, [(2, {"meta": {"resume_tier": "peer"}})])  # as recovery.progress copies it
    s.close()
    with ReadView(home=launcher_env["home"]) as view:
        d = view.job(ids[1])
        body = job_page(d)
        other = job_page(view.job(ids[2]))
    table = body.split('<table id="attempts">')[1].split("</table>")[0]
    assert '<td class="resumed">from step 10 (peer)</td>' in table and '<td class="resumed">-</td>' in table
    assert '<td class="resumed">from step 10</td>' in other  # no tier recorded: the step alone
    # the timeline labels the resume the same way
    assert [a["resume_step"] for a in d["report"]["attempts"]] == [None, None]  # no checkpoint root: no record
    from launcher.serve.timeline import timeline_svg

    rep = dict(d["report"], attempts=[dict(a, resume_step=10, resume_tier="local") for a in d["report"]["attempts"]])
    svg = timeline_svg(rep)
    assert svg.count('<text class="resumed"') == 2 and ">from step 10 (local)</text>" in svg
