"""The errors ``launcher.api.facade.Launcher`` raises, and the exit codes the CLI ends with: the
names the CLI's verbs (``launcher.commands``) use, so that they import nothing below ``launcher.api``
for them. Every error is a ``LauncherError``; the classes themselves live where they are raised."""

from __future__ import annotations

from typing import Optional

from launcher.core.errors import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_USAGE, ConfigError, LauncherError

__all__ = ["EXIT_FAILED", "EXIT_INTERRUPTED", "EXIT_USAGE", "CancelFailed", "ConfigError", "LauncherError",
           "WrongKind"]


class WrongKind(LauncherError):
    """An option that fits one job was asked of a sweep, or one that fits a sweep of a single job
    (``Launcher.launch(single=True)`` of a sweep spec, ``Launcher.report`` with a plot of a sweep or a
    metric of a job). ``name`` is the job, sweep or spec; ``option`` the option; ``sweep`` whether
    NAME is a sweep; ``size`` its number of elements when known."""

    exit_code = EXIT_USAGE

    def __init__(self, name: str, option: str, sweep: bool, size: Optional[int] = None):
        self.name, self.option, self.sweep, self.size = name, option, sweep, size
        if sweep:
            what = f"a sweep of {size} elements" if size is not None else "a sweep"
            super().__init__(f"{name} is {what}: {option} applies to one job (pass one element, {name}-e<index>)")
        else:
            super().__init__(f"{name} is not a sweep: {option} applies to a sweep's elements")


def __getattr__(name: str):
    if name == "CancelFailed":
        # on first use: its module (the state store's) stays unimported at the CLI's start
        from launcher.recovery.cancel import CancelFailed

        return CancelFailed
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
