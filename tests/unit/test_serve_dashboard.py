"""`launcher serve` as a dashboard (issue 33): its pure page-building pieces (events as
sentences, command lines quoted for the shell, UTC times for the browser to convert, the
resources' words, sweeps folded into one row, everything escaped), and the reads behind them
(filters, state counts, a job's log from an offset, the store the header names) over a real
store served by the real server."""

from __future__ import annotations

import json
import shlex

from tests.fixtures.serving import get, served

HOSTILE = '<script>window.PWNED=1</script>"\'&'


# ---------------------------------------------------------------- pure pieces
def test_an_event_reads_as_a_sentence_and_an_unknown_one_as_words_never_json():
    from launcher.serve.sentences import sentence

    assert sentence({"ts": 1.0, "kind": "retry_scheduled", "reason": "preempted", "delay_s": 30}) == \
        "Will retry in 30 s: preempted."
    assert sentence({"kind": "submitted", "target": "local", "native_id": "123", "attempt": 2}) == \
        "Attempt 2 submitted to local as 123."
    assert sentence({"kind": "cancel_failed", "errors": ["id 1: gone", "id 2: refused"]}) == \
        "A cancel did not go through: id 1: gone; id 2: refused."
    odd = sentence({"kind": "brand_new_kind", "why": {"a": 1}, "n": 2})
    assert odd == "Brand new kind: why: a 1; n: 2." and "{" not in odd
    # a sentence's missing word: the generic form, not a KeyError
    assert sentence({"kind": "burst", "to": "aws"}) == "Burst: to: aws."
    assert sentence({"kind": "watch_error", "error": "boom", "attempt": 3}) == \
        "The watcher hit an error: boom. (attempt: 3)"


def test_command_lines_are_quoted_for_the_shell_and_cancel_shows_only_while_open():
    from launcher.serve.actions import job_commands, sweep_commands

    hostile = "job; rm -rf ~ $(x) 'q'"
    lines = dict(job_commands(hostile, True, home="/tmp/my home"))
    assert set(lines) == {"status", "logs", "report", "cancel"}
    for what, line in lines.items():
        words = shlex.split(line)
        assert words[0] == "LAUNCHER_HOME=/tmp/my home" and words[1:3] == ["launcher", what]
        assert words[-1] == hostile
    assert shlex.split(lines["logs"])[3] == "-f"
    assert [w for w, _ in job_commands("j", False)] == ["status", "logs", "report"]
    assert dict(job_commands("j", False))["logs"] == "launcher logs j"
    assert shlex.split(dict(job_commands("-x", False))["status"]) == ["launcher", "status", "--", "-x"]
    s = dict(sweep_commands("sw 1", True))
    assert shlex.split(s["cancel"]) == ["launcher", "cancel", "sw 1"]
    assert shlex.split(s["logs of element 0"]) == ["launcher", "logs", "--element", "0", "sw 1"]
    assert "cancel" not in dict(sweep_commands("sw", False))


def test_times_are_utc_iso_with_the_epoch_for_the_browser_to_convert():
    from launcher.serve.pages import ts, utc_iso

    assert utc_iso(0) == "1970-01-01T00:00:00Z" and utc_iso(None) is None
    assert ts(86400.5) == '<time datetime="1970-01-02T00:00:00Z" data-ts="86400.500">1970-01-02 00:00:00 UTC</time>'
    assert ts(None) == "-"


def test_resources_read_in_a_few_words():
    from launcher.api.readview import resources_of
    from launcher.serve.pages import resources_text

    assert resources_text(resources_of("resources: {nodes: 2, gpus_per_node: 8, accelerator: H100}")) == \
        "2 nodes x 8 H100"
    assert resources_text(resources_of("resources: {cpus_per_node: 4, memory_per_node: 16GB}")) == "4 CPUs, 16GB"
    assert resources_text(resources_of("resources: {gpus_per_node: 1}")) == "1 GPU"
    assert resources_text(resources_of("name: x\nrun: 'true'\n")) == "-"
    assert resources_of("resources: [not, a, map") == {} and resources_of("- a list\n") == {}


def test_a_region_is_the_handles_infra_or_region():
    from launcher.api.readview import region_of

    assert region_of(json.dumps({"extra": {"infra": "aws/us-east-1"}})) == "aws/us-east-1"
    assert region_of(json.dumps({"extra": {"job_dir": "/x"}})) is None
    assert region_of("{oops") is None and region_of(None) is None


def _row(jid, state="RUNNING", sweep=None, element=None, name="n", **kw):
    d = {"job_id": jid, "name": name, "target": "local", "backend": "local", "state": state, "reason": "",
         "owner": "ann", "open": True, "created": 0.0, "updated": 1.0, "duration_s": 61.0, "region": None,
         "resources": {}, "attempts": 1, "last_step": 7, "cost_usd": 0.5, "cost_complete": True, "sweep": sweep,
         "element": element}
    d.update(kw)
    return d


def _page(jobs, where=None):
    return {"total": len(jobs), "all": 9, "counts": {"state": {"RUNNING": 5, "FAILED": 4}, "owner": {"ann": 9},
                                                      "target": {"local": 9}}, "where": where or {}, "page": 1,
            "pages": 1, "per_page": 500, "jobs": jobs, "sweeps": [], "unreadable": {}, "exists": True}


def test_a_sweeps_elements_fold_into_one_row_that_opens_to_them_in_index_order():
    from launcher.serve.pages import jobs_body

    jobs = [_row("a"), _row("sw-e2", sweep="sw", element=2), _row("b"), _row("sw-e0", sweep="sw", element=0,
                                                                             state="COMPLETED")]
    html = jobs_body(_page(jobs))
    order = [html.index(x) for x in ('data-job="a"', 'data-sweep="sw"', 'data-job="sw-e0"', 'data-job="sw-e2"',
                                     'data-job="b"')]
    assert order == sorted(order), order
    assert html.count('class="sweep-row"') == 1 and html.count('data-parent="sw" hidden') == 2
    sweep_row = html.split('class="sweep-row"')[1].split("</tr>")[0]
    assert "1 RUNNING" in sweep_row and "1 COMPLETED" in sweep_row and 'aria-expanded="false"' in sweep_row


def test_state_counts_and_filters_link_to_filtered_pages_and_keep_the_choice():
    from launcher.serve.pages import jobs_body

    html = jobs_body(_page([_row("a")], where={"state": "RUNNING", "text": "tr ain"}))
    assert 'href="/?state=FAILED&amp;q=tr+ain"' in html  # the search kept, the state changed
    assert '<option value="RUNNING" selected>' in html and 'value="tr ain"' in html
    assert 'id="job-count">1 of 9<' in html and 'id="filter-clear"' in html


def test_every_value_reaching_the_dashboard_is_escaped():
    from launcher.serve.pages import job_body, jobs_body, layout

    html = jobs_body(_page([_row(HOSTILE, name=HOSTILE, owner=HOSTILE, region=HOSTILE, sweep=None)],
                           where={"text": HOSTILE, "owner": HOSTILE}))
    assert "<script>" not in html and "PWNED=1</script>" not in html
    d = {"job_id": HOSTILE, "name": HOSTILE, "target": HOSTILE, "backend": "local", "state": "RUNNING",
         "reason": HOSTILE, "owner": HOSTILE, "open": True, "last_step": 3, "ckpt_root": HOSTILE, "attempts": [],
         "events": [{"ts": 1.0, "kind": HOSTILE, "error": HOSTILE}], "report": None, "report_error": HOSTILE,
         "log": {"job_id": HOSTILE, "open": True, "path": HOSTILE, "why": None, "offset": 5, "next": 9, "size": 9,
                 "text": HOSTILE}}
    page = job_body(d)
    assert "<script>" not in page and page.count("&lt;script&gt;") >= 5
    assert "<script>" not in layout("t", "", home=HOSTILE).split("</head>")[1]


# ---------------------------------------------------------------- the reads, over the real server
def test_filters_counts_and_search_read_the_store_and_the_search_is_no_pattern(launcher_env):
    from tests.fixtures.serve_store import build

    home = launcher_env["home"]
    build(home, 60)
    with served(home) as (url, _):
        d = json.loads(get(url + "/api/jobs?state=RUNNING&target=local")[2])
        assert {(j["state"], j["target"]) for j in d["jobs"]} == {("RUNNING", "local")}
        assert d["total"] == sum(1 for i in range(60) if i % 5 == 1 and i % 3 == 0) and d["all"] == 60
        assert d["counts"]["state"]["RUNNING"] == 12 and sum(d["counts"]["target"].values()) == 60
        d = json.loads(get(url + "/api/jobs?q=TRAIN-3")[2])
        assert d["total"] == sum(1 for i in range(60) if i % 7 == 3) and {j["name"] for j in d["jobs"]} == {"train-3"}
        for pattern in ("%", "_", "train-_", "\\"):  # LIKE's wildcards are searched for as text
            assert json.loads(get(url + "/api/jobs?q=" + pattern.replace("%", "%25"))[2])["total"] == 0, pattern
        owner = d["jobs"][0]["owner"]
        assert json.loads(get(url + f"/api/jobs?owner={owner}")[2])["total"] == 60
        assert json.loads(get(url + "/api/jobs?owner=someone-else")[2])["total"] == 0
        html = get(url + "/?state=RUNNING")[2]
        assert 'id="job-count">12 of 60<' in html and f'<code id="store">{home / "state.db"}</code>' in html


def test_a_jobs_log_is_read_from_an_offset_and_its_tail_starts_at_a_line(launcher_env):
    from tests.fixtures.serve_store import build

    home = launcher_env["home"]
    build(home, 10)
    job = "job-00006"  # local, RUNNING
    with served(home) as (url, _):
        d = json.loads(get(url + f"/api/log/{job}")[2])
        assert d["path"].endswith(f"{job}/output.log") and d["why"] == "no output yet" and d["open"]
        log = home / "jobs" / job / "output.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_bytes(b"".join(b"line %06d\n" % i for i in range(20000)))  # 240,000 bytes
        d = json.loads(get(url + f"/api/log/{job}")[2])
        assert d["text"].startswith("line ") and d["text"].endswith("line 019999\n")
        assert d["next"] == d["size"] == 240000 and 0 < d["size"] - d["offset"] <= 65536
        with open(log, "ab") as f:
            f.write("ünïcode <b>\n".encode())
        d2 = json.loads(get(url + f"/api/log/{job}?offset={d['next']}")[2])
        assert d2["text"] == "ünïcode <b>\n" and d2["offset"] == 240000
        page = get(url + f"/job/{job}")[2]
        assert 'data-follow="1"' in page and "ünïcode &lt;b&gt;" in page and "<b>\n" not in page
        other = json.loads(get(url + "/api/log/job-00001")[2])  # a target this config does not know
        assert other["path"] is None and "cluster-a" in other["why"] and other["text"] == ""
