"""The one place the launcher makes an AWS client: the S3 client of every ``s3://``
checkpoint root (``S3Store``: the launcher's commands and the job-side helper alike) and the
EC2 client of ``launcher plan --live-spot-prices`` take their botocore ``Config`` from here.

Every client has bounded timeouts and bounded retries, so an endpoint that accepts
connections and never answers (a frozen moto or MinIO, a stalled proxy) fails a request
instead of hanging the command:

==============================  =======  ================================================
``$LAUNCHER_S3_CONNECT_TIMEOUT``  5 s    to open a connection
``$LAUNCHER_S3_READ_TIMEOUT``     10 s   to wait for each read of an answer (and each send)
``$LAUNCHER_S3_MAX_ATTEMPTS``     3      attempts per request, the first included
                                         (botocore's ``standard`` retry mode: throttling,
                                         5xx, timeouts and dropped connections, with backoff)
==============================  =======  ================================================

A silent endpoint therefore fails one request after about
``attempts x (read timeout) + backoff`` (about 35 s with the defaults), never more. A value
that is not a positive number is ignored (the default applies).

Stdlib only at import time (boto3 and botocore are imported by ``aws_sdk()`` when a client is
made): this package ships inside the job-side zipapp.
"""

from __future__ import annotations

import os
from typing import Optional

CONNECT_TIMEOUT_S = 5.0
READ_TIMEOUT_S = 10.0
MAX_ATTEMPTS = 3
MAX_POOL_CONNECTIONS = 32  # scan() reads on several threads

CONNECT_ENV = "LAUNCHER_S3_CONNECT_TIMEOUT"
READ_ENV = "LAUNCHER_S3_READ_TIMEOUT"
ATTEMPTS_ENV = "LAUNCHER_S3_MAX_ATTEMPTS"


def _positive(name: str, default, kind=float):
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        v = kind(raw)
    except ValueError:
        return default
    return v if v > 0 and v == v and v != float("inf") else default


def limits() -> tuple[float, float, int]:
    """(connect timeout s, read timeout s, attempts) in force: the defaults or the env vars."""
    return (_positive(CONNECT_ENV, CONNECT_TIMEOUT_S), _positive(READ_ENV, READ_TIMEOUT_S),
            _positive(ATTEMPTS_ENV, MAX_ATTEMPTS, int))


def aws_sdk():
    """(boto3, botocore), with the submodules the launcher uses loaded: ``boto3.s3.transfer``,
    ``botocore.config``, ``botocore.exceptions``. The one place they are imported, on the first
    call (they cost a good part of a second, and this package ships inside the job-side zipapp,
    where no SDK may be installed). Raises ImportError without boto3."""
    import boto3.s3.transfer
    import botocore.config
    import botocore.exceptions

    return boto3, botocore


def client_config(**extra):
    """The botocore ``Config`` every client the launcher makes uses (EXTRA: more options).
    ``total_max_attempts`` counts the first attempt (botocore's ``max_attempts`` does not:
    ``max_attempts=4`` made 5)."""
    _, botocore = aws_sdk()
    connect, read, attempts = limits()
    return botocore.config.Config(connect_timeout=connect, read_timeout=read,
                                  retries={"total_max_attempts": attempts, "mode": "standard"}, **extra)


def s3_endpoint() -> Optional[str]:
    """``$AWS_ENDPOINT_URL_S3``, else ``$AWS_ENDPOINT_URL``, else None (AWS itself)."""
    return os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or None


def make_s3_client():
    """A boto3 S3 client for checkpoint roots: its usual credentials, ``s3_endpoint()``,
    ``client_config()``. Raises ImportError without boto3."""
    boto3, _ = aws_sdk()
    return boto3.session.Session().client("s3", endpoint_url=s3_endpoint(),
                                          config=client_config(max_pool_connections=MAX_POOL_CONNECTIONS))


def unanswered(e: Optional[BaseException]) -> Optional[BaseException]:
    """The botocore error in E (E itself or what it wraps, e.g. boto3's S3UploadFailedError)
    that means the endpoint could not be reached or did not answer in time: a connect or read
    timeout, a refused or dropped connection. None if E is something else."""
    try:
        _, botocore = aws_sdk()
    except ImportError:
        return None
    x = botocore.exceptions
    kinds = (x.ConnectTimeoutError, x.ReadTimeoutError, x.EndpointConnectionError, x.ConnectionClosedError)
    seen = set()
    while e is not None and id(e) not in seen:
        if isinstance(e, kinds):
            return e
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    return None


def unanswered_message(root: str, endpoint: Optional[str], e: BaseException) -> str:
    """One line: which root and endpoint did not answer (E: what ``unanswered`` found),
    within what, and what to do."""
    _, botocore = aws_sdk()
    connect, read, attempts = limits()
    where = endpoint or "AWS S3"
    # refused or unresolvable (a connect timeout is not one)
    if isinstance(e, botocore.exceptions.EndpointConnectionError):
        what = "cannot connect to the S3 endpoint %s (%d attempts)" % (where, attempts)
    else:
        what = "the S3 endpoint %s did not answer within %gs to connect, %gs to read (%d attempts)" % (
            where, connect, read, attempts)
    return ("%s: %s; check that it is up and reachable (AWS_ENDPOINT_URL_S3, network, proxy), or raise "
            "$%s / $%s / $%s" % (root, what, READ_ENV, CONNECT_ENV, ATTEMPTS_ENV))
