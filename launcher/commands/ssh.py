"""``launcher targets trust NAME``: show a target's SSH host key(s) and record them;
``launcher targets login NAME`` / ``logout NAME``: a ``transport: openssh`` target's shared
connection (docs/configuration.md#mfa-logins-transport-openssh).

Connecting to an unknown host is refused (launcher never trusts on first use by
itself); this command is the one place a key gets added, after a person compared
the fingerprint (or passed --yes). A changed key is refused here too: the old
entry has to be removed by hand (``ssh-keygen -R``) first.
"""

from __future__ import annotations

import click

from launcher.commands.common import launcher_of


@click.command("trust")
@click.argument("name")
@click.option("--yes", "-y", is_flag=True,
              help="Record unknown keys without asking (compare the fingerprint some other way first).")
@click.pass_context
def trust(ctx, name, yes):
    """Show the SSH host key and SHA256 fingerprint of target NAME (and of its ProxyJump
    hosts), and record them in known_hosts after confirmation."""
    def confirm(info) -> bool:
        click.echo(f"{info.name} ({info.hop}) offers an {info.display_type} host key:")
        click.echo(f"  fingerprint: {info.fingerprint}")
        click.echo(f"  public key:  {info.public_key}")
        if yes:
            return True
        return click.confirm(f"Is this the right key? Record it in {info.known_hosts}", default=False)

    for info in launcher_of(ctx).trust(name, confirm):
        if info.status == "recorded":
            click.echo(f"{info.name}: recorded {info.display_type} {info.fingerprint} in {info.known_hosts}")
        else:
            click.echo(f"{info.name}: already trusted ({info.display_type} {info.fingerprint})")


@click.command("login")
@click.argument("name")
@click.pass_context
def login(ctx, name):
    """Open the shared SSH connection of target NAME (transport: openssh) in this terminal: ssh
    asks here for what the login needs (a key's passphrase, a TOTP code); every later command
    reuses the connection without asking, until it expires."""
    info = launcher_of(ctx).login(name)
    click.echo(f"{name}: {info.status} ({info.where}); shared connection {info.control_path}, "
               f"kept {info.persist} when idle")


@click.command("logout")
@click.argument("name")
@click.pass_context
def logout(ctx, name):
    """Close the shared SSH connection of target NAME (transport: openssh)."""
    info = launcher_of(ctx).login(name, logout=True)
    click.echo(f"{name}: {info.status} ({info.where})")


def register(group) -> None:
    for command in (trust, login, logout):
        group.commands["targets"].add_command(command)
