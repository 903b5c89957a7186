"""launcher.checkpoint.s3_client: the one botocore Config every AWS client of the launcher
uses (bounded connect/read timeouts and retries), its env overrides, and which errors mean
"the endpoint did not answer"."""

from __future__ import annotations

import pytest
from botocore.exceptions import (ClientError, ConnectTimeoutError, EndpointConnectionError, NoCredentialsError,
                                 ReadTimeoutError)

from launcher.checkpoint import S3Store
from launcher.checkpoint.s3_client import client_config, limits, unanswered, unanswered_message

KNOBS = ("LAUNCHER_S3_CONNECT_TIMEOUT", "LAUNCHER_S3_READ_TIMEOUT", "LAUNCHER_S3_MAX_ATTEMPTS")


@pytest.fixture(autouse=True)
def _clean(monkeypatch):
    for k in KNOBS:
        monkeypatch.delenv(k, raising=False)


def test_defaults_are_bounded():
    assert limits() == (5.0, 10.0, 3)
    c = client_config()
    assert (c.connect_timeout, c.read_timeout) == (5.0, 10.0)
    assert c.retries == {"total_max_attempts": 3, "mode": "standard"}


def test_env_overrides_and_nonsense_keeps_the_default(monkeypatch):
    monkeypatch.setenv("LAUNCHER_S3_CONNECT_TIMEOUT", "1.5")
    monkeypatch.setenv("LAUNCHER_S3_READ_TIMEOUT", "30")
    monkeypatch.setenv("LAUNCHER_S3_MAX_ATTEMPTS", "5")
    assert limits() == (1.5, 30.0, 5)
    for bad in ("0", "-1", "nan", "inf", "soon"):
        monkeypatch.setenv("LAUNCHER_S3_READ_TIMEOUT", bad)
        monkeypatch.setenv("LAUNCHER_S3_MAX_ATTEMPTS", bad)
        assert limits()[1:] == (10.0, 3), bad
    monkeypatch.setenv("LAUNCHER_S3_MAX_ATTEMPTS", "2.5")
    assert limits()[2] == 3


def test_the_store_client_carries_the_config(monkeypatch):
    monkeypatch.setenv("LAUNCHER_S3_READ_TIMEOUT", "7")
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:9")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    s3 = S3Store("b", "p").s3
    assert s3.meta.config.read_timeout == 7.0 and s3.meta.config.connect_timeout == 5.0
    assert s3.meta.config.retries["mode"] == "standard" and s3.meta.config.retries["total_max_attempts"] == 3
    assert s3.meta.endpoint_url == "http://127.0.0.1:9"


def test_which_errors_mean_no_answer():
    url = "http://127.0.0.1:9/b"
    read = ReadTimeoutError(endpoint_url=url)
    assert unanswered(read) is read
    assert unanswered(ConnectTimeoutError(endpoint_url=url)) is not None
    try:  # boto3's transfer manager wraps it
        try:
            raise read
        except ReadTimeoutError as e:
            raise RuntimeError("S3UploadFailedError: upload failed") from e
    except RuntimeError as wrapped:
        assert unanswered(wrapped) is read
    assert unanswered(NoCredentialsError()) is None
    assert unanswered(ClientError({"Error": {"Code": "NoSuchKey"}}, "GetObject")) is None
    assert unanswered(ValueError("x")) is None


def test_the_message_is_one_line_naming_root_endpoint_and_remedy():
    m = unanswered_message("s3://b/run", "http://127.0.0.1:9", ReadTimeoutError(endpoint_url="x"))
    assert "\n" not in m and m.startswith("s3://b/run: ") and "http://127.0.0.1:9 did not answer" in m
    assert "10s to read (3 attempts)" in m and "$LAUNCHER_S3_READ_TIMEOUT" in m
    m = unanswered_message("s3://b", None, EndpointConnectionError(endpoint_url="x"))
    assert "cannot connect to the S3 endpoint AWS S3" in m


def test_a_refused_endpoint_is_root_unavailable_with_the_message(monkeypatch):
    """Nothing listens on port 9 of 127.0.0.1: refused at once, named in one line."""
    from launcher.checkpoint import RootUnavailable

    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:9")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("LAUNCHER_S3_MAX_ATTEMPTS", "1")
    with pytest.raises(RootUnavailable) as ei:
        S3Store("b", "run").check_root()
    assert str(ei.value).startswith("s3://b/run: cannot connect to the S3 endpoint http://127.0.0.1:9")


NO_SDK = r'''
import sys
sys.modules["boto3"] = sys.modules["botocore"] = None   # a compute node with no SDK installed
from launcher.checkpoint import S3Store, RootUnavailable
for call in (lambda s: s.check_root(), lambda s: s.read("x/COMMIT.json"), lambda s: s.exists_dir("x")):
    try:
        call(S3Store("bkt", "run"))
    except RootUnavailable as e:
        print("ONE LINE:", e)
'''


def test_without_boto3_every_call_is_one_line_naming_the_root():
    """A node without boto3 (an s3:// root reached from a bare image): RootUnavailable that
    names the root and says what to install, never a raw ModuleNotFoundError of botocore."""
    import subprocess  # a fresh interpreter, where boto3 can be made absent
    import sys  # the same interpreter as the tests

    p = subprocess.run([sys.executable, "-c", NO_SDK], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert len(lines) == 3, p.stdout
    for line in lines:
        assert line.startswith("ONE LINE: s3://bkt/run: boto3 is needed") and "pip install boto3" in line, line
