"""The framing that keeps login-shell noise out of command output (launcher/transport/frame.py)."""

from __future__ import annotations

import random
import shlex
import subprocess

import pytest

from launcher.transport.frame import Frame, FrameError, FrameParser

BANNER_OUT = b"Welcome to login1!\nSubmitted batch job 4242\n4242;cluster\nRUNNING\n"
BANNER_ERR = b"pyenv: cannot rehash: /root/.pyenv/shims isn't writable\nmodule: command not found\n"


def wire(frame: Frame, out: bytes, err: bytes, rc: int, *, noise_out=b"", noise_err=b"", after_out=b"",
         after_err=b"") -> tuple[bytes, bytes]:
    """What a framed command puts on the wire, noise included."""
    return (noise_out + frame.start + out + frame.end + f" {rc}\n".encode() + after_out,
            noise_err + frame.start + err + frame.end + b"\n" + after_err)


def parse(frame, stdout: bytes, stderr: bytes, chunk=None) -> FrameParser:
    p = FrameParser(frame)
    if chunk is None:
        p.feed_stdout(stdout)
        p.feed_stderr(stderr)
        return p
    for i in range(0, max(len(stdout), len(stderr)), chunk):
        p.feed_stdout(stdout[i:i + chunk])
        p.feed_stderr(stderr[i:i + chunk])
    return p


def test_noise_before_and_after_the_frame_is_dropped_on_both_streams():
    f = Frame.new()
    so, se = wire(f, b"123\n", b"warn\n", 0, noise_out=BANNER_OUT, noise_err=BANNER_ERR,
                  after_out=b"bye\n", after_err=b"logout noise\n")
    p = parse(f, so, se)
    assert p.done and p.result() == (0, b"123\n", b"warn\n")
    assert p.noise == (BANNER_OUT, BANNER_ERR)
    assert p.leftover == (b"bye\n", b"logout noise\n")


def test_noise_without_a_trailing_newline_does_not_hide_the_start_marker():
    f = Frame.new()
    so, se = wire(f, b"x", b"", 3, noise_out=b"banner with no newline", noise_err=b"\x1b[31mred")
    assert parse(f, so, se).result() == (3, b"x", b"")


@pytest.mark.parametrize("out", [b"", b"\n", b"no newline at the end", b"two\nlines\n", b"\n\n\n", b"\x00\xff bin"])
def test_output_is_returned_byte_for_byte(out):
    f = Frame.new()
    so, se = wire(f, out, out, 7)
    assert parse(f, so, se).result() == (7, out, out)


@pytest.mark.parametrize("chunk", [1, 2, 3, 7, 31, 64])
def test_every_split_of_the_stream_gives_the_same_result(chunk):
    f = Frame.new()
    so, se = wire(f, b"4242\n" * 50, b"e" * 333, 12, noise_out=BANNER_OUT * 3, noise_err=BANNER_ERR,
                  after_out=b"later", after_err=b"later")
    p = parse(f, so, se, chunk=chunk)
    assert p.result() == (12, b"4242\n" * 50, b"e" * 333)


def test_nothing_is_done_until_both_end_markers_and_the_exit_code_line_arrived():
    f = Frame.new()
    so, se = wire(f, b"out\n", b"err\n", 0)
    p = FrameParser(f)
    p.feed_stdout(so[:-2])  # " 0\n" cut after the space
    p.feed_stderr(se)
    assert p.started and not p.done
    with pytest.raises(FrameError):
        p.result()
    p.feed_stdout(so[-2:])
    assert p.done and p.result() == (0, b"out\n", b"err\n")


def test_markers_of_another_command_inside_the_output_are_just_output():
    f, other = Frame.new(), Frame.new()
    inner = other.start + b"fake\n" + other.end + b" 0\n"
    so, se = wire(f, inner, inner, 5)
    assert parse(f, so, se).result() == (5, inner, inner)


def test_noise_of_an_earlier_command_between_frames_is_not_output():
    first, second = Frame.new(), Frame.new()
    so1, se1 = wire(first, b"1\n", b"", 0)
    so2, se2 = wire(second, b"2\n", b"", 0)
    p = FrameParser(second)
    p.feed_stdout(so1 + b"late background noise\n" + so2)
    p.feed_stderr(se1 + se2)
    assert p.result() == (0, b"2\n", b"")


def test_a_malformed_end_line_is_an_error_not_a_guess():
    f = Frame.new()
    p = FrameParser(f)
    with pytest.raises(FrameError):
        p.feed_stdout(f.start + b"x" + f.end + b" notanumber\n")


def test_scripts_never_contain_a_whole_marker():
    f = Frame.new()
    for text in (f.exec_script("echo hi"), *f.shell_script("echo hi"), *f.shell_script("cat", stdin_len=5)):
        assert f.start.strip() not in text.encode() and f.end.strip() not in text.encode()


# ---------------------------------------------------------------------------- through a real shell

def run_exec(cmdline: str, stdin: bytes = b"", bashrc_noise: bool = True) -> FrameParser:
    f = Frame.new()
    noisy = "echo banner; echo 4242; echo warn >&2; " if bashrc_noise else ""
    p = subprocess.run(["bash", "-c", noisy + "sh -c " + shlex.quote(f.exec_script(cmdline))], input=stdin,
                       capture_output=True, timeout=30)
    parser = parse(f, p.stdout, p.stderr)
    assert parser.done and p.returncode == parser.result()[0]
    return parser


def test_exec_script_through_sh_keeps_exit_code_streams_and_stdin():
    p = run_exec("cat; echo err >&2; exit 9", stdin=b"in\nput")
    assert p.result() == (9, b"in\nput", b"err\n")


def test_a_shell_that_echoes_its_input_cannot_fake_a_marker():
    p = run_exec("set -xv; echo out; set +xv")
    rc, out, err = p.result()
    assert (rc, out) == (0, b"out\n") and b"set +xv" in err


def test_one_long_lived_bash_runs_framed_commands_back_to_back_with_stdin():
    """The persistent-shell protocol against a real bash reading its stdin from a pipe."""
    frames, script = [], b""
    data = "line 1\nsecret=it's $(not expanded)\n" * 100 + "no newline"
    for cmd, stdin in [("echo one; echo e1 >&2", None), ("cat; exit 4", data), ("exit 0", None),
                       ("cd /; echo $PWD", None), ("pwd", None), ("cat", "")]:
        f = Frame.new()
        raw = stdin.encode() if stdin is not None else None
        head, tail = f.shell_script(cmd, None if raw is None else len(raw))
        script += head.encode() + (raw or b"") + tail.encode()
        frames.append(f)
    p = subprocess.run(["bash", "--noprofile", "--norc"], input=b"echo startup noise\n" + script,
                       capture_output=True, timeout=30, cwd="/tmp")
    results = []
    out, err = p.stdout, p.stderr
    for f in frames:
        parser = parse(f, out, err)
        results.append(parser.result())
        out, err = parser.leftover
    assert results[0] == (0, b"one\n", b"e1\n")
    assert results[1] == (4, data.encode(), b"")
    assert results[2][0] == 0  # `exit` ran in a subshell: the shell lives on
    assert results[3][1] == b"/\n" and results[4][1] == b"/tmp\n"  # and `cd` did not stick
    assert results[5] == (0, b"", b"")


def test_random_noise_around_random_output_never_leaks():
    rng = random.Random(7)
    for _ in range(200):
        f = Frame.new()
        out = bytes(rng.randrange(256) for _ in range(rng.randrange(50)))
        noise = bytes(rng.randrange(256) for _ in range(rng.randrange(50)))
        so, se = wire(f, out, noise, rng.randrange(256), noise_out=noise, noise_err=out, after_out=noise)
        p = parse(f, so, se, chunk=rng.randrange(1, 20))
        assert p.result()[1:] == (out, noise)


# ---------------------------------------------------------------------------- login environment

def test_login_env_exports_quote_values_and_skip_functions_and_shell_bookkeeping():
    from launcher.transport.shell import login_env_exports

    raw = b"\0".join([b"PATH=/opt/slurm/bin:/usr/bin", b"MODULEPATH=/a b", b"PWD=/home/x", b"SHLVL=2",
                      b"BASH_FUNC_module%%=() {  eval $(/usr/bin/modulecmd bash $*)\n}", b"_=/usr/bin/env",
                      b"WEIRD=it's $(id)\nline2", b"EMPTY=", b"UNCHANGED=same", b""])
    line = login_env_exports(raw, current={"UNCHANGED": "same"})
    out = subprocess.run(["bash", "--noprofile", "--norc", "-c", line + "\nenv -0"], capture_output=True,
                         env={"PWD": "/keep"}, cwd="/").stdout
    env = dict(item.split(b"=", 1) for item in out.split(b"\0") if b"=" in item)
    assert env[b"PATH"] == b"/opt/slurm/bin:/usr/bin" and env[b"MODULEPATH"] == b"/a b"
    assert env[b"WEIRD"] == b"it's $(id)\nline2" and env[b"EMPTY"] == b""
    assert b"BASH_FUNC_module%%" not in env and env.get(b"SHLVL") != b"2" and env[b"PWD"] == b"/"
    assert "UNCHANGED" not in line
    assert login_env_exports(b"") == "true"


def test_ssh_shell_is_persistent_by_default_and_checked():
    from launcher.core.errors import ConfigError
    from launcher.transport.sshconfig import SSHOptions

    assert SSHOptions.from_target({"ssh_host": "h"}).ssh_shell == "persistent"
    assert SSHOptions.from_target({"ssh_host": "h", "ssh_shell": "exec"}).ssh_shell == "exec"
    with pytest.raises(ConfigError, match="ssh_shell"):
        SSHOptions.from_target({"ssh_host": "h", "ssh_shell": "tmux"})
