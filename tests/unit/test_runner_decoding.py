"""Scheduler output that is not UTF-8 (a banner in Latin-1, a node name with a stray byte)
never raises at the transport boundary: it is decoded with replacement characters."""

from __future__ import annotations

import sys

from launcher.transport.runner import LocalRunner

PRINTS = [sys.executable, "-c", "import sys; sys.stdout.buffer.write(b'caf\\xe9 42\\n'); "
          "sys.stderr.buffer.write(b'sbatch: error: \\xff\\xfe\\n'); sys.exit(1)"]


def test_a_command_printing_invalid_utf8_is_read_with_replacement_characters():
    r = LocalRunner().run(PRINTS, check=False)
    assert (r.returncode, r.stdout, r.stderr) == (1, "caf\ufffd 42\n", "sbatch: error: \ufffd\ufffd\n")


def test_a_started_command_printing_invalid_utf8_too():
    r = LocalRunner().start(PRINTS, check=False).wait()
    assert (r.stdout, r.stderr) == ("caf\ufffd 42\n", "sbatch: error: \ufffd\ufffd\n")


def test_input_still_goes_in_as_utf8():
    r = LocalRunner().run([sys.executable, "-c", "import sys; print(sys.stdin.buffer.read().hex())"],
                          input="é", check=False)
    assert r.stdout.strip() == "c3a9"
