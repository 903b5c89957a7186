"""``launcher serve [--host H] [--port N]``: a live, read-only web view of the jobs."""

from __future__ import annotations

import sys
import click

_HELP = """Serve a live, read-only web view of the jobs in this launcher home: the jobs
(state, target, attempts, cost), a sweep's element table and its best element, one
job's attempt timeline and goodput breakdown as `launcher report` draws them. Pages
refresh themselves every --refresh seconds.

It reads the same state store as the other commands and never writes it (nor asks a
scheduler: run `launcher watch` to keep the store current). It binds to 127.0.0.1
unless --host says otherwise; any address that is not this machine's loopback needs a
token (--token or $LAUNCHER_SERVE_TOKEN, at least 16 characters): open
http://HOST:PORT/?token=TOKEN once (a cookie keeps it), or send
`Authorization: Bearer TOKEN`. The token is never logged. IPv6 works (--host ::1).
Idle or slow clients cannot starve it: each has --header-timeout seconds to send its
request's headers.
"""


def _finite(param, value):
    if value != value:  # click's FloatRange lets nan through (it compares false with both bounds)
        raise click.BadParameter("expected a number of seconds, got nan", param=param)
    return value


@click.command("serve", help=_HELP, short_help="A live, read-only web view of the jobs (127.0.0.1 by default).")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option("--port", default=8765, show_default=True, type=click.IntRange(0, 65535),
              help="Port to bind (0: any free port, printed).")
@click.option("--token", envvar="LAUNCHER_SERVE_TOKEN", show_envvar=True,
              help="The token every request must carry; required for a non-loopback --host.")
@click.option("--refresh", default=5.0, show_default=True, type=click.FloatRange(0.5, 3600),
              callback=lambda ctx, param, v: _finite(param, v), help="Seconds between a page's refreshes.")
@click.option("--header-timeout", default=5.0, show_default=True, type=click.FloatRange(0.5, 600),
              callback=lambda ctx, param, v: _finite(param, v),
              help="Seconds a client has, from connecting, to send its request's headers (then 408 and closed).")
@click.option("--quiet", is_flag=True, help="No access log on stderr.")
def serve(host, port, token, refresh, header_timeout, quiet):
    # the verb's own modules: loaded when it runs, not at --help
    from launcher.api.readview import ReadView
    from launcher.serve.server import check_bind, serve as run

    check_bind(host, token)  # before anything is opened

    def log(line: str) -> None:
        if not quiet:
            print(line, file=sys.stderr, flush=True)

    def ready(httpd) -> None:
        h, p = httpd.server_address[:2]
        shown = f"[{h}]" if ":" in h else h
        how = " (token required)" if token else ""
        click.echo(f"serving {view.store_name} read-only at http://{shown}:{p}/{how}; Ctrl-C stops", err=True)

    with ReadView() as view:
        try:
            run(view, host=host, port=port, token=token, refresh_s=refresh, log=log, ready=ready,
                header_timeout=header_timeout)
        except KeyboardInterrupt:
            click.echo("stopped", err=True)


def register(group) -> None:
    group.add_command(serve)
