"""``launcher targets trust NAME``: show a target's SSH host key(s) and record them.

Connecting to an unknown host is refused (launcher never trusts on first use by
itself); this command is the one place a key gets added, after a person compared
the fingerprint (or passed --yes). A changed key is refused here too: the old
entry has to be removed by hand (``ssh-keygen -R``) first.
"""

from __future__ import annotations

import click


@click.command("trust")
@click.argument("name")
@click.option("--yes", "-y", is_flag=True,
              help="Record unknown keys without asking (compare the fingerprint some other way first).")
@click.pass_context
def trust(ctx, name, yes):
    """Show the SSH host key and SHA256 fingerprint of target NAME (and of its ProxyJump
    hosts), and record them in known_hosts after confirmation."""
    from launcher.api.context import App
    from launcher.core.errors import ConfigError
    from launcher.transport import trust_host_keys

    root = ctx.find_root()
    app = root.obj if isinstance(root.obj, App) else App()
    raw = app.config.raw_target(name)
    if not raw.get("ssh_host"):
        raise ConfigError(f"target {name!r} has no ssh_host: its commands run on this machine, "
                          "there is no host key to trust")

    def confirm(info) -> bool:
        click.echo(f"{info.name} ({info.hop}) offers an {info.display_type} host key:")
        click.echo(f"  fingerprint: {info.fingerprint}")
        click.echo(f"  public key:  {info.public_key}")
        if yes:
            return True
        return click.confirm(f"Is this the right key? Record it in {info.known_hosts}", default=False)

    for info in trust_host_keys(raw, confirm, target_name=name):
        if info.status == "recorded":
            click.echo(f"{info.name}: recorded {info.display_type} {info.fingerprint} in {info.known_hosts}")
        else:
            click.echo(f"{info.name}: already trusted ({info.display_type} {info.fingerprint})")


def register(group) -> None:
    group.commands["targets"].add_command(trust)
