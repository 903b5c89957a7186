"""SSH settings without a server: quoting, ~/.ssh/config resolution, known_hosts rules,
retry helpers. OpenSSH's own tools (sh, ssh-keygen) are the reference where they can be."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from launcher.core.errors import ConfigError, TransientError
from launcher.transport.runner import LocalRunner
from launcher.transport import SSHRunner, make_runner
from launcher.transport.cmdline import remote_command
from launcher.transport.errors import ConnectionLostError, HostUnreachableError
from launcher.transport.retry import retry, retry_idempotent
from launcher.transport.known_hosts import KnownHosts, append_known_host, fingerprint, host_matches
from launcher.transport.sshconfig import SSHOptions, SSHTargetOptions, resolve

HOSTILE = ["plain", "with space", "it's", 'dq"uote', "; rm -rf /tmp/x", "$(id)", "`id`", "new\nline",
           "*", "", "-n", "back\\slash", "tab\there", "ünïcode", "$HOME"]


def test_every_argv_element_reaches_the_remote_program_unchanged_through_a_posix_shell():
    probe = [sys.executable, "-c", "import sys, json, os; print(json.dumps([sys.argv[1:], os.environ['X']]))"]
    line = remote_command(probe + HOSTILE, {"X": "v a l'ue; $(id)"})
    out = subprocess.run(["sh", "-c", line], capture_output=True, text=True, check=True).stdout
    assert json.loads(out) == [HOSTILE, "v a l'ue; $(id)"]


def test_env_names_that_are_not_identifiers_are_refused():
    with pytest.raises(ConfigError, match="invalid environment variable name"):
        remote_command(["true"], {"A;rm -rf /": "x"})


def test_options_come_from_a_raw_target_dict_and_ignore_other_backend_keys():
    o = SSHOptions.from_target({"backend": "slurm", "partition": "gpu", "ssh_host": "login", "ssh_port": 2222,
                                "env": {"SLURM_CONF": "/etc/slurm/slurm.conf"}})
    assert (o.ssh_host, o.ssh_port, dict(o.env)) == ("login", 2222, {"SLURM_CONF": "/etc/slurm/slurm.conf"})
    assert SSHOptions.from_target(SSHTargetOptions(ssh_host="h", ssh_user="u")).ssh_user == "u"


def test_options_without_ssh_host_or_with_a_bad_port_are_config_errors():
    with pytest.raises(ConfigError, match="ssh_host is not set"):
        SSHOptions.from_target({"backend": "slurm"})
    with pytest.raises(ConfigError, match="ssh_port"):
        SSHOptions.from_target({"ssh_host": "h", "ssh_port": 70000})


def test_make_runner_is_local_without_ssh_host_and_ssh_with_it():
    assert isinstance(make_runner({"backend": "slurm", "env": {"A": "1"}}), LocalRunner)
    r = make_runner({"ssh_host": "login", "ssh_config": ""}, target_name="c")
    assert isinstance(r, SSHRunner) and r.trust_hint == "launcher targets trust c"


def test_importing_the_ssh_modules_does_not_import_paramiko():
    code = ("import sys, launcher.cli, launcher.transport.sshconfig, launcher.commands.ssh; "
            "from launcher.transport import SSHRunner, runner_for_target, trust_host_keys; "
            "import launcher.transport.connect, launcher.transport.pool, launcher.transport.shell, "
            "launcher.transport.transfer; "
            "print('paramiko' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True).stdout.strip() == "False"


# ---------------------------------------------------------------------------- ssh config

def _cfg(tmp_path, text):
    p = tmp_path / "ssh_config"
    p.write_text(text)
    return str(p)


def test_an_alias_takes_hostname_port_user_and_identityfile_from_the_ssh_config(tmp_path):
    cfg = _cfg(tmp_path, "Host cluster\n  HostName 10.1.2.3\n  Port 2200\n  User alice\n"
                         "  IdentityFile ~/keys/cluster\n  ServerAliveInterval 7\n")
    hop = resolve(SSHOptions(ssh_host="cluster", ssh_config=cfg)).target
    assert (hop.hostname, hop.port, hop.user, hop.keepalive) == ("10.1.2.3", 2200, "alice", 7.0)
    assert hop.identity_files[0].endswith("/keys/cluster") and not hop.identity_files[0].startswith("~")
    assert hop.known_hosts_name == "[10.1.2.3]:2200"


def test_target_options_override_the_ssh_config_and_ssh_key_comes_first(tmp_path):
    cfg = _cfg(tmp_path, "Host cluster\n  HostName 10.1.2.3\n  Port 2200\n  User alice\n  IdentityFile /k/cfg\n")
    hop = resolve(SSHOptions(ssh_host="cluster", ssh_config=cfg, ssh_port=22, ssh_user="bob",
                             ssh_key="/k/mine", known_hosts="/kh")).target
    assert (hop.port, hop.user) == (22, "bob")
    assert hop.identity_files == ("/k/mine", "/k/cfg") and hop.known_hosts_files == ("/kh",)
    assert hop.known_hosts_name == "10.1.2.3"


def test_proxyjump_chains_resolve_each_jump_through_the_config_first_hop_first(tmp_path):
    cfg = _cfg(tmp_path, "Host bastion\n  HostName 192.0.2.1\n  User jumper\n  ProxyJump gw\n"
                         "Host gw\n  HostName 192.0.2.9\n  Port 2022\n"
                         "Host login\n  HostName 10.0.0.5\n  ProxyJump bastion,carol@inner:2201\n")
    route = resolve(SSHOptions(ssh_host="login", ssh_config=cfg, ssh_user="me"))
    assert [(h.hostname, h.port) for h in route.hops] == [("192.0.2.9", 2022), ("192.0.2.1", 22),
                                                          ("inner", 2201), ("10.0.0.5", 22)]
    assert route.hops[1].user == "jumper" and route.hops[2].user == "carol"
    assert route.pool_key[:3] == ("me", "10.0.0.5", 22) and len(route.pool_key[3]) == 3


def test_proxyjump_none_and_loops(tmp_path):
    cfg = _cfg(tmp_path, "Host a\n  ProxyJump b\nHost b\n  ProxyJump a\nHost c\n  ProxyJump none\n")
    assert len(resolve(SSHOptions(ssh_host="c", ssh_config=cfg)).hops) == 1
    with pytest.raises(ConfigError, match="ProxyJump loop"):
        resolve(SSHOptions(ssh_host="a", ssh_config=cfg))


def test_include_files_are_read_relative_to_dot_ssh(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / ".ssh" / "conf.d").mkdir(parents=True)
    (tmp_path / ".ssh" / "conf.d" / "c.conf").write_text("Host inc\n  HostName 203.0.113.7\n  Port 2345\n")
    cfg = _cfg(tmp_path, "Include conf.d/*.conf\n")
    hop = resolve(SSHOptions(ssh_host="inc", ssh_config=cfg)).target
    assert (hop.hostname, hop.port) == ("203.0.113.7", 2345)


def test_a_missing_ssh_config_file_means_no_settings(tmp_path):
    hop = resolve(SSHOptions(ssh_host="h.example", ssh_config=str(tmp_path / "none"))).target
    assert (hop.hostname, hop.port) == ("h.example", 22)


# ---------------------------------------------------------------------------- known_hosts

@pytest.fixture
def host_key(tmp_path):
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "hk")], check=True)
    typ, b64 = (tmp_path / "hk.pub").read_text().split()[:2]
    import base64

    return typ, b64, base64.b64decode(b64), tmp_path / "hk.pub"


def test_fingerprint_is_the_one_ssh_keygen_prints(host_key):
    typ, b64, blob, pub = host_key
    out = subprocess.run(["ssh-keygen", "-l", "-E", "sha256", "-f", str(pub)], capture_output=True, text=True,
                         check=True).stdout
    assert out.split()[1] == fingerprint(blob)


def test_entries_hashed_by_ssh_keygen_are_found_by_name_and_port(tmp_path, host_key):
    typ, b64, blob, _ = host_key
    kh = tmp_path / "known_hosts"
    kh.write_text(f"[login.example]:2222 {typ} {b64}\nother.example {typ} {b64}\n")
    subprocess.run(["ssh-keygen", "-q", "-H", "-f", str(kh)], check=True, capture_output=True)
    assert "login.example" not in kh.read_text()  # really hashed
    k = KnownHosts([str(kh)])
    assert [e.blob for e in k.lookup("[login.example]:2222")] == [blob]
    assert k.lookup("login.example") == [] and k.lookup("[login.example]:2223") == []


def test_our_hashed_entries_are_found_by_ssh_keygen(tmp_path, host_key):
    typ, b64, blob, _ = host_key
    kh = tmp_path / "sub" / "known_hosts"
    append_known_host(str(kh), "[10.0.0.1]:2200", typ, blob, hashed=True)
    assert "10.0.0.1" not in kh.read_text() and oct(kh.stat().st_mode & 0o777) == "0o600"
    r = subprocess.run(["ssh-keygen", "-F", "[10.0.0.1]:2200", "-f", str(kh)], capture_output=True, text=True)
    assert r.returncode == 0 and b64 in r.stdout
    assert KnownHosts([str(kh)]).lookup("[10.0.0.1]:2200")[0].blob == blob


def test_appending_keeps_existing_lines_even_without_a_trailing_newline(tmp_path, host_key):
    typ, b64, blob, _ = host_key
    kh = tmp_path / "known_hosts"
    kh.write_text(f"a.example {typ} {b64}")
    append_known_host(str(kh), "b.example", typ, blob)
    assert [len(KnownHosts([str(kh)]).lookup(n)) for n in ("a.example", "b.example")] == [1, 1]


def test_patterns_wildcards_negation_markers_and_junk_lines(tmp_path, host_key):
    typ, b64, blob, _ = host_key
    kh = tmp_path / "known_hosts"
    kh.write_text("# comment\n\ngarbage\nx.example ssh-ed25519 !!notbase64!!\n"
                  f"*.corp.example,!bad.corp.example {typ} {b64}\n"
                  f"@cert-authority *.ca.example {typ} {b64}\n"
                  f"@revoked * {typ} {b64}\n")
    k = KnownHosts([str(kh)])
    assert len(k.lookup("node1.corp.example")) == 1
    assert k.lookup("bad.corp.example") == [] and k.lookup("corp.example") == []
    assert k.lookup("h.ca.example") == [] and k.has_ca_for("h.ca.example")
    assert k.revoked(blob) is not None
    assert host_matches(["[127.0.0.1]:22?2"], "[127.0.0.1]:2202")
    assert not host_matches(["[127.0.0.1]:2202"], "127.0.0.1")


# ---------------------------------------------------------------------------- retries

def test_retry_idempotent_retries_transient_errors_with_growing_delays():
    calls, sleeps = [], []

    def fn():
        calls.append(1)
        if len(calls) < 3:
            raise ConnectionLostError("dropped")
        return "ok"

    assert retry_idempotent(fn, sleep=sleeps.append, base_delay=1, max_delay=100) == "ok"
    assert len(calls) == 3 and len(sleeps) == 2 and 0.5 <= sleeps[0] <= 1 and 1 <= sleeps[1] <= 2


def test_retry_idempotent_gives_up_after_its_attempts_and_never_retries_other_errors():
    sleeps = []
    with pytest.raises(TransientError):
        retry_idempotent(lambda: (_ for _ in ()).throw(TransientError("x")), attempts=3, sleep=sleeps.append)
    assert len(sleeps) == 2
    n = []
    with pytest.raises(ConfigError):
        retry_idempotent(lambda: n.append(1) or (_ for _ in ()).throw(ConfigError("bad")), sleep=sleeps.append)
    assert n == [1]


def test_retry_takes_the_callers_policy_and_raises_what_it_refuses():
    seen, sleeps = [], []

    def fn():
        seen.append(1)
        raise (HostUnreachableError if len(seen) == 1 else ConnectionLostError)("x")

    with pytest.raises(ConnectionLostError):
        retry(fn, policy=lambda e: isinstance(e, HostUnreachableError), sleep=sleeps.append)
    assert len(seen) == 2 and len(sleeps) == 1
