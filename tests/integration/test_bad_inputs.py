"""0 tracebacks in the bad inputs (issue 28): wrong types, huge numbers, nan/inf, negative
durations, non-UTF-8 and binary files, directories and symlink loops as files, deep nesting,
YAML anchor bombs, unknown targets, job ids with shell metacharacters and path traversal,
bad option values, bad ports and URLs, all through the real `launcher` command (a subprocess,
each case with its own throw-away LAUNCHER_HOME and config). Every case must end with a
documented exit code (README "Exit codes": 0-5; never 70, the internal-error code), within
120 s, and print no Python traceback. (An integration test: ~200 real `launcher` processes, in the
services tier beside the other end-to-end CLI tests, not in the pure-logic unit tier.)

Before the fixes of this pass: `state migrate --to` / LAUNCHER_STATE_URL with an unclosed IPv6
bracket ended in exit 70 (ValueError: Invalid IPv6 URL), `serve --refresh nan` started a server
(click's FloatRange lets nan through), `watch --interval nan|-1|0|inf` was accepted, and
`plan --work 0h|99999999999999h` ranked offers for no or absurd work."""

from __future__ import annotations

import concurrent.futures
import os
import subprocess
import sys
from pathlib import Path

import pytest

LAUNCHER = str(Path(sys.executable).parent / "launcher")
DOCUMENTED = {0, 1, 2, 3, 4, 5}  # launcher.core.errors: OK, FAILED, USAGE, STATE, UNREACHABLE, INSTALL

GOOD = "name: j\nrun: echo hi\n"


def w(name, text, mode="w"):
    def setup(d):
        p = os.path.join(d, name)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, mode) as f:
            f.write(text)
    return setup


def spec(text):
    return w("s.yaml", text)


def many(*fs):
    def setup(d):
        for f in fs:
            f(d)
    return setup


def symloop(d):
    os.symlink(os.path.join(d, "b.yaml"), os.path.join(d, "a.yaml"))
    os.symlink(os.path.join(d, "a.yaml"), os.path.join(d, "b.yaml"))


def mkdir(name):
    def setup(d):
        os.makedirs(os.path.join(d, name), exist_ok=True)
    return setup


def nested(n):
    return "name: j\nrun: echo\nenv: " + "[" * n + "]" * n + "\n"


BOMB = ("a: &a [x,x,x,x,x,x,x,x,x]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\n"
        "d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]\ne: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]\nf: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]\n"
        "g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]\nh: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]\nname: j\nrun: echo\n")

SPEC_BODIES = {
    "empty": "",
    "only-comment": "# nothing\n",
    "list-top": "- a\n- b\n",
    "scalar-top": "42\n",
    "null-top": "null\n",
    "name-int": "name: 5\nrun: echo\n",
    "run-dict": "name: j\nrun: {a: 1}\n",
    "run-empty-list": "name: j\nrun: []\n",
    "tl-neg": "name: j\nrun: echo\nresources: {time_limit: -1h}\n",
    "tl-zero": "name: j\nrun: echo\nresources: {time_limit: 0}\n",
    "tl-huge": "name: j\nrun: echo\nresources: {time_limit: 1e12h}\n",
    "tl-nan": "name: j\nrun: echo\nresources: {time_limit: .nan}\n",
    "tl-inf": "name: j\nrun: echo\nresources: {time_limit: .inf}\n",
    "tl-bigint": "name: j\nrun: echo\nresources: {time_limit: " + "9" * 400 + "}\n",
    "tl-list": "name: j\nrun: echo\nresources: {time_limit: [1]}\n",
    "tl-bool": "name: j\nrun: echo\nresources: {time_limit: true}\n",
    "tl-str-nan": "name: j\nrun: echo\nresources: {time_limit: nanh}\n",
    "tl-str-inf": "name: j\nrun: echo\nresources: {time_limit: infh}\n",
    "gpus-neg": "name: j\nrun: echo\nresources: {gpus: -1}\n",
    "gpus-huge": "name: j\nrun: echo\nresources: {gpus: 100000000000000000000000}\n",
    "gpus-float": "name: j\nrun: echo\nresources: {gpus: 1.5}\n",
    "gpus-nan": "name: j\nrun: echo\nresources: {gpus: .nan}\n",
    "mem-neg": "name: j\nrun: echo\nresources: {memory: -5G}\n",
    "mem-huge": "name: j\nrun: echo\nresources: {memory: 1e300G}\n",
    "mem-inf": "name: j\nrun: echo\nresources: {memory: .inf}\n",
    "nodes-zero": "name: j\nrun: echo\ntopology: {nodes: 0}\n",
    "nodes-huge": "name: j\nrun: echo\ntopology: {nodes: 99999999999999999999}\n",
    "env-nonstr": "name: j\nrun: echo\nenv: {A: [1, 2]}\n",
    "env-badname": "name: j\nrun: echo\nenv: {'1 A': x}\n",
    "env-list": "name: j\nrun: echo\nenv: [a, b]\n",
    "unknown-key": "name: j\nrun: echo\nbogus: 1\n",
    "targets-str": "name: j\nrun: echo\ntargets: local\n",
    "targets-unknown": "name: j\nrun: echo\ntargets: [nosuch]\n",
    "targets-meta": "name: j\nrun: echo\ntargets: ['a;rm -rf /']\n",
    "seed-neg": "name: j\nrun: echo\nseed: -1\n",
    "seed-huge": "name: j\nrun: echo\nseed: " + "9" * 50 + "\n",
    "seed-float": "name: j\nrun: echo\nseed: 1.5\n",
    "deadline-past": "name: j\nrun: echo\ncost: {deadline: 2001-01-01T00:00Z}\n",
    "deadline-zero": "name: j\nrun: echo\ncost: {deadline: 0}\n",
    "deadline-neg": "name: j\nrun: echo\ncost: {deadline: -5h}\n",
    "deadline-huge": "name: j\nrun: echo\ncost: {deadline: 1e12h}\n",
    "deadline-year": "name: j\nrun: echo\ncost: {deadline: 99999-01-01T00:00Z}\n",
    "deadline-naive": "name: j\nrun: echo\ncost: {deadline: 2030-01-01T00:00}\n",
    "deadline-baddate": "name: j\nrun: echo\ncost: {deadline: 2030-13-45T00:00Z}\n",
    "deadline-nan": "name: j\nrun: echo\ncost: {deadline: .nan}\n",
    "deadline-inf": "name: j\nrun: echo\ncost: {deadline: .inf}\n",
    "deadline-yaml-date": "name: j\nrun: echo\ncost: {deadline: 2030-01-01}\n",
    "deadline-bigint": "name: j\nrun: echo\ncost: {deadline: " + "9" * 30 + "}\n",
    "budget-zero": "name: j\nrun: echo\ncost: {max_total_usd: 0}\n",
    "budget-neg": "name: j\nrun: echo\ncost: {max_total_usd: -3}\n",
    "budget-nan": "name: j\nrun: echo\ncost: {max_total_usd: .nan}\n",
    "budget-inf": "name: j\nrun: echo\ncost: {max_total_usd: .inf}\n",
    "budget-huge": "name: j\nrun: echo\ncost: {max_total_usd: 1e308}\n",
    "hourly-nan": "name: j\nrun: echo\ncost: {max_hourly_usd: .nan}\n",
    "hourly-inf": "name: j\nrun: echo\ncost: {max_hourly_usd: .inf}\n",
    "budget-str": "name: j\nrun: echo\ncost: {max_total_usd: lots}\n",
    "total-steps-zero": "name: j\nrun: echo\ncost: {total_steps: 0}\n",
    "total-steps-huge": "name: j\nrun: echo\ncost: {total_steps: " + "9" * 40 + "}\n",
    "ckpt-interval-neg": "name: j\nrun: echo\ncheckpoint: {interval: -1m}\n",
    "ckpt-cost-huge": "name: j\nrun: echo\ncheckpoint: {cost: 1e15h}\n",
    "expected-runtime-huge": "name: j\nrun: echo\nresources: {expected_runtime: 1e15h}\n",
    "recovery-neg": "name: j\nrun: echo\nrecovery: {app_error: -1}\n",
    "recovery-huge": "name: j\nrun: echo\nrecovery: {app_error: " + "9" * 40 + "}\n",
    "sweep-empty": "name: j\nrun: echo\nsweep: {grid: {}}\n",
    "sweep-huge": "name: j\nrun: echo\nsweep: {grid: {a: [" + ",".join(map(str, range(200))) + "], b: [" + ",".join(map(str, range(200))) + "]}}\n",
    "sweep-str": "name: j\nrun: echo\nsweep: nope\n",
    "burst-after-neg": "name: j\nrun: echo\nburst: {after: -1h, to: [local]}\n",
    "nested-deep": nested(3000),
    "bomb": BOMB,
    "bad-yaml": "name: [j\nrun: echo\n",
    "tab-yaml": "name: j\n\trun: echo\n",
    "dup-key": "name: j\nname: k\nrun: echo\n",
    "merge-key": "<<: {name: j}\nrun: echo\n",
    "python-tag": "name: !!python/object/apply:os.system ['true']\nrun: echo\n",
    "binary-tag": "name: !!binary aGVsbG8=\nrun: echo\n",
    "set-tag": "name: j\nrun: !!set {a, b}\n",
    "timestamp-name": "name: 2020-01-01\nrun: echo\n",
    "nul-in-run": "name: j\nrun: \"echo \\0\"\n",
    "huge-line": "name: j\nrun: echo " + "x" * 2_000_000 + "\n",
    "workdir-nul": "name: j\nrun: echo\nworkdir: \"a\\0b\"\n",
    "workdir-missing": "name: j\nrun: echo\nworkdir: /no/such/dir/here\n",
    "image-meta": "name: j\nrun: echo\nimage: '$(reboot)'\n",
    "name-traversal": "name: ../../etc/passwd\nrun: echo\n",
    "name-meta": "name: 'j; rm -rf ~'\nrun: echo\n",
    "name-huge": "name: " + "n" * 100000 + "\n",
    "notify-str": "name: j\nrun: echo\nnotify: 5\n",
    "tracking-str": "name: j\nrun: echo\ntracking: 5\n",
    "slurm-str": "name: j\nrun: echo\nslurm: 5\n",
    "int-keys": "1: 2\n",
    "float-key": "name: j\nrun: echo\nenv: {1.5: x}\n",
    "null-key": "name: j\nrun: echo\nenv: {~: x}\n",
    "complex-key": "? [a, b]\n: c\nname: j\nrun: echo\n",
}

CASES = []
for k, body in SPEC_BODIES.items():
    CASES.append((f"validate-{k}", ["validate", "{d}/s.yaml"], spec(body)))
for k in ("deadline-past", "deadline-year", "ckpt-cost-huge", "bomb"):
    for cmd in ("render", "plan"):
        CASES.append((f"{cmd}-{k}", [cmd, "{d}/s.yaml"], spec(SPEC_BODIES[k])))
for k in ("deadline-past", "seed-huge", "name-traversal"):
    CASES.append((f"launch-{k}", ["launch", "{d}/s.yaml", "-t", "local"], spec(SPEC_BODIES[k])))

FILE_CASES = {
    "nonutf8": w("s.yaml", b"name: j\nrun: echo \xff\xfe\x80\n", "wb"),
    "binary": w("s.yaml", os.urandom(4096), "wb"),
    "utf16": w("s.yaml", GOOD.encode("utf-16"), "wb"),
    "bom": w("s.yaml", b"\xef\xbb\xbf" + GOOD.encode(), "wb"),
    "dir": mkdir("s.yaml"),
    "symloop": lambda d: (symloop(d), os.symlink(os.path.join(d, "a.yaml"), os.path.join(d, "s.yaml"))),
    "missing": lambda d: None,
    "dangling": lambda d: os.symlink("/no/such/target", os.path.join(d, "s.yaml")),
    "unreadable": lambda d: (w("s.yaml", GOOD)(d), os.chmod(os.path.join(d, "s.yaml"), 0)),
}
for k, setup in FILE_CASES.items():
    CASES.append((f"validate-file-{k}", ["validate", "{d}/s.yaml"], setup))
CASES.append(("plan-file-nonutf8", ["plan", "{d}/s.yaml"], FILE_CASES["nonutf8"]))

good = spec(GOOD)
PLAN_OPTS = [["--work", "nan"], ["--work", "infh"], ["--work", "9" * 400], ["--work", ""], ["--work", "1e308h"],
             ["--checkpoint-cost", "-5m"], ["--checkpoint-cost", "nan"], ["--work", "1h", "--checkpoint-cost", "2h"],
             ["--target", "../../etc"], ["--work", "0.0000001s"]]
for opts in PLAN_OPTS:
    CASES.append(("plan-opt-" + "_".join(opts)[:40], ["plan", "{d}/s.yaml", *opts], good))

JOB_IDS = ["../../etc/passwd", "$(reboot)", "", "--", "x" * 5000, "\u00e9\u00e9", "%s%n", "..", "/", "j\u202e"]
for n, jid in enumerate(JOB_IDS):  # each id through status and one of the other commands that take an id
    for cmd in ("status", ("logs", "cancel", "report")[n % 3]):
        if jid == "--" and cmd != "status":
            continue
        CASES.append((f"{cmd}-id-{jid[:12]!r}", [cmd, "--", jid] if jid.startswith("-") else [cmd, jid], None))
CASES += [
    ("logs-element-neg", ["logs", "nosuch", "--element", "-1"], None),
    ("logs-element-huge", ["logs", "nosuch", "--element", "9" * 40], None),
    ("diff-bad", ["diff", "../../etc", "$(id)"], None),
    ("diff-same", ["diff", "x", "x"], None),
    ("diff-json", ["diff", "x", "y", "--json=1"], None),
    ("status-json-val", ["status", "--json=yes"], None),
    ("status-bad-flag", ["status", "--jsn"], None),
    ("watch-interval-huge", ["watch", "--once", "--interval", "1e400"], None),
    ("watch-interval-bigint", ["watch", "--once", "--interval", "9" * 400], None),
    ("watch-interval-nan", ["watch", "--once", "--interval", "nan"], None),
    ("watch-interval-neg", ["watch", "--once", "--interval", "-1"], None),
    ("watch-interval-inf", ["watch", "--once", "--interval", "inf"], None),
    ("watch-interval-zero", ["watch", "--once", "--interval", "0"], None),
    ("ckpt-root-file", ["checkpoints", "{d}/f"], w("f", "x")),
    ("ckpt-root-missing", ["checkpoints", "{d}/nope"], None),
    ("ckpt-root-nonutf8", ["checkpoints", "{d}/\udcff"], None),
    ("ckpt-root-s3-bad", ["checkpoints", "s3://"], None),
    ("ckpt-root-s3-bad2", ["checkpoints", "s3:///x"], None),
    ("ckpt-gc-keep-neg", ["checkpoints", "{d}", "--gc", "--keep", "-1"], None),
    ("ckpt-gc-keep-huge", ["checkpoints", "{d}", "--gc", "--keep", "9" * 40], None),
    ("ckpt-symloop", ["checkpoints", "{d}/a.yaml"], symloop),
    ("ckpt-bad-commit", ["checkpoints", "{d}/ck"], w("ck/step-00000001/COMMIT.json", "{not json")),
    ("ckpt-commit-list", ["checkpoints", "{d}/ck"], w("ck/step-00000001/COMMIT.json", "[1,2]")),
    ("ckpt-commit-types", ["checkpoints", "{d}/ck"], w("ck/step-00000001/COMMIT.json", '{"step": "x", "files": 5}')),
    ("ckpt-commit-hugestep", ["checkpoints", "{d}/ck"], w("ck/step-00000001/COMMIT.json", '{"step": 1e999, "files": {"a": -1}}')),
    ("ckpt-commit-nan", ["checkpoints", "{d}/ck"], w("ck/step-00000001/COMMIT.json", '{"step": NaN, "files": {"a": NaN}}')),
    ("ckpt-commit-nested", ["checkpoints", "{d}/ck"], w("ck/step-00000001/COMMIT.json", "[" * 100000 + "]" * 100000)),
    ("lineage-file", ["lineage", "{d}/f"], w("f", "x")),
    ("lineage-dir", ["lineage", "{d}/ck"], w("ck/step-00000001/COMMIT.json", '{"step": "x"}')),
    ("report-plot-missing-dir", ["report", "nosuch", "--plot", "{d}/no/dir/x.png"], None),
    ("report-metric-mode", ["report", "nosuch", "--metric", "", "--mode", "max"], None),
    ("targets-bad-config", ["targets", "--no-probe"], None, {"cfg": "targets: 5\n"}),
    ("targets-config-list", ["targets", "--no-probe"], None, {"cfg": "- a\n"}),
    ("targets-config-nonutf8", ["targets", "--no-probe"], None, {"cfg": b"targets: {\xff: 1}\n"}),
    ("targets-config-dir", ["targets", "--no-probe"], None, {"cfg_dir": True}),
    ("targets-config-bomb", ["targets", "--no-probe"], None, {"cfg": BOMB}),
    ("targets-config-badtarget", ["targets", "--no-probe"], None, {"cfg": "targets: {x: {backend: nosuch}}\n"}),
    ("targets-config-badname", ["targets", "--no-probe"], None, {"cfg": "targets: {'../x': {backend: local}}\n"}),
    ("targets-config-port", ["targets", "--no-probe"], None, {"cfg": "targets: {x: {backend: slurm, ssh_host: h, ssh_port: 99999999999}}\n"}),
    ("targets-config-port-str", ["targets", "--no-probe"], None, {"cfg": "targets: {x: {backend: slurm, ssh_host: h, ssh_port: abc}}\n"}),
    ("targets-config-timeout-nan", ["targets", "--no-probe"], None, {"cfg": "targets: {x: {backend: slurm, ssh_host: h, ssh_connect_timeout: .nan}}\n"}),
    ("targets-config-ttl-inf", ["targets"], None, {"cfg": "targets: {x: {backend: slurm, facts_ttl: .inf}}\n"}),
    ("targets-login-unknown", ["targets", "login", "nosuch"], None),
    ("targets-login-local", ["targets", "login", "local"], None),
    ("targets-trust-unknown", ["targets", "trust", "../../etc"], None),
    ("targets-json-val", ["targets", "--json=1"], None),
    ("serve-port-neg", ["serve", "--port", "-1"], None),
    ("serve-port-huge", ["serve", "--port", "70000"], None),
    ("serve-port-str", ["serve", "--port", "abc"], None),
    ("serve-host-bad", ["serve", "--host", "not a host", "--port", "0"], None),
    ("serve-host-public-no-token", ["serve", "--host", "0.0.0.0", "--port", "0"], None),
    ("serve-refresh-nan", ["serve", "--refresh", "nan"], None),
    ("serve-refresh-neg", ["serve", "--refresh", "-1"], None),
    ("migrate-bad-url", ["state", "migrate", "--to", "not a url"], None),
    ("migrate-http-url", ["state", "migrate", "--to", "http://x/y"], None),
    ("migrate-pg-port", ["state", "migrate", "--to", "postgresql://u@127.0.0.1:99999/db"], None),
    ("migrate-pg-port-str", ["state", "migrate", "--to", "postgresql://u@127.0.0.1:abc/db"], None),
    ("migrate-empty", ["state", "migrate", "--to", ""], None),
    ("migrate-pg-ipv6-bad", ["state", "migrate", "--to", "postgresql://u@[::1/db"], None),
    ("state-url-env-bad", ["status"], None, {"env": {"LAUNCHER_STATE_URL": "postgresql://u@[::1/db"}}),
    ("state-url-env-http", ["status"], None, {"env": {"LAUNCHER_STATE_URL": "http://x"}}),
    ("home-is-file", ["status"], w("homefile", "x"), {"env": {"LAUNCHER_HOME": "{d}/homefile"}}),
    ("home-nul", ["status"], None, {"env": {"LAUNCHER_HOME": "{d}/h\udcff"}}),
    ("launch-target-unknown", ["launch", "{d}/s.yaml", "-t", "nosuch"], good),
    ("launch-target-meta", ["launch", "{d}/s.yaml", "-t", "$(id)"], good),
    ("render-target-traversal", ["render", "{d}/s.yaml", "-t", "../../etc"], good),
    ("facts-dir", ["render", "{d}/s.yaml", "--facts", "{d}"], good),
    ("facts-bad-json", ["render", "{d}/s.yaml", "--facts", "{d}/f.json"], many(good, w("f.json", "{bad"))),
    ("facts-list", ["render", "{d}/s.yaml", "--facts", "{d}/f.json"], many(good, w("f.json", "[1]"))),
    ("facts-types", ["render", "{d}/s.yaml", "--facts", "{d}/f.json"], many(good, w("f.json", '{"partitions": 5, "gpus": "x"}'))),
    ("facts-nan", ["render", "{d}/s.yaml", "--facts", "{d}/f.json"], many(good, w("f.json", '{"cpus": NaN, "max_time": Infinity}'))),
]


def _run(root: Path, i: int, case) -> tuple[str, str]:
    """(case name, what went wrong or "")."""
    name, argv, setup = case[:3]
    extra = case[3] if len(case) > 3 else {}
    d = root / str(i)
    d.mkdir()
    d = str(d)
    if setup:
        setup(d)
    cfg = os.path.join(d, "config.yaml")
    if extra.get("cfg_dir"):
        os.makedirs(cfg)
    else:
        c = extra.get("cfg", "targets: {}\n")
        with open(cfg, "wb" if isinstance(c, bytes) else "w") as f:
            f.write(c)
    env = {**os.environ, "LAUNCHER_HOME": os.path.join(d, "home"), "LAUNCHER_CONFIG": cfg}
    env.pop("LAUNCHER_DEBUG", None)
    env.pop("LAUNCHER_STATE_URL", None)
    for k, v in extra.get("env", {}).items():
        env[k] = v.replace("{d}", d)
    args = [a.replace("{d}", d) for a in argv]
    try:
        p = subprocess.run([LAUNCHER, *args], env=env, capture_output=True, timeout=120, cwd=d,
                           stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return name, "did not end within 120 s (waited for the launcher to refuse the input)"
    err = p.stderr.decode("utf-8", "replace")
    last = err.strip().splitlines()[-1] if err.strip() else ""
    if "Traceback" in err or "Traceback" in p.stdout.decode("utf-8", "replace"):
        return name, f"printed a traceback (exit {p.returncode}): {last[:300]}"
    if p.returncode not in DOCUMENTED:
        return name, f"exit {p.returncode}: {last[:300]}"
    return name, ""


@pytest.mark.timeout(1800)  # one CLI start per case (each bounded at 120 s): 500 s beside the other tiers in CI
def test_bad_inputs_end_with_a_documented_code_and_no_traceback(tmp_path):
    assert len(CASES) >= 100
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda ic: _run(tmp_path, *ic), enumerate(CASES)))
    failed = [f"{name}: {why}" for name, why in results if why]
    assert not failed, f"{len(failed)} of {len(CASES)} bad inputs:\n" + "\n".join(failed)


def _launcher(tmp_path, *args):
    env = {**os.environ, "LAUNCHER_HOME": str(tmp_path / "home"), "LAUNCHER_CONFIG": str(tmp_path / "c.yaml")}
    env.pop("LAUNCHER_DEBUG", None)
    (tmp_path / "c.yaml").write_text("targets: {}\n")
    return subprocess.run([LAUNCHER, *args], env=env, capture_output=True, text=True, timeout=120,
                          cwd=str(tmp_path), stdin=subprocess.DEVNULL)


def test_plan_refuses_no_work_and_absurd_work_naming_the_option(tmp_path):
    (tmp_path / "s.yaml").write_text(GOOD)
    for value, says in (("0h", "positive"), ("00:00:00", "positive"), ("-1h", "duration"),
                        ("99999999999999h", "at most"), ("1e12h", "duration")):
        p = _launcher(tmp_path, "plan", "s.yaml", "--work", value)
        assert p.returncode == 2 and "--work" in p.stderr and says in p.stderr, (value, p.stderr)
        assert "plan for" not in p.stdout, p.stdout  # no ranking
    p = _launcher(tmp_path, "plan", "s.yaml", "--checkpoint-cost", "0s")
    assert p.returncode == 2 and "--checkpoint-cost" in p.stderr and "positive" in p.stderr, p.stderr


def test_plan_says_a_past_deadline_has_passed(tmp_path):
    (tmp_path / "s.yaml").write_text("name: j\nrun: echo\ncost: {deadline: '2001-01-01T00:00Z'}\n")
    p = _launcher(tmp_path, "plan", "s.yaml")
    assert p.returncode == 1 and "cost.deadline has passed" in p.stdout, p.stdout + p.stderr
    assert "Traceback" not in p.stderr


def test_watch_and_serve_refuse_nan_and_out_of_range_seconds(tmp_path):
    for value in ("nan", "-1", "0", "inf", "1e400"):
        p = _launcher(tmp_path, "watch", "--once", "--interval", value)
        assert p.returncode == 2 and "--interval" in p.stderr, (value, p.stderr)
    p = _launcher(tmp_path, "serve", "--refresh", "nan", "--port", "0")
    assert p.returncode == 2 and "--refresh" in p.stderr and "nan" in p.stderr, p.stderr


def test_a_state_url_with_an_unclosed_ipv6_bracket_is_one_line(tmp_path):
    p = _launcher(tmp_path, "state", "migrate", "--to", "postgresql://u@[::1/db")
    assert p.returncode in DOCUMENTED - {0} and "internal error" not in p.stderr, p.stderr
