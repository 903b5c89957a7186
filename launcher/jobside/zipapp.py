"""The job-side helper as one self-contained zipapp, staged next to a job's script.

The zip holds ``launcher.checkpoint`` and ``launcher.jobside`` (both stdlib only) under a
stub ``launcher/__init__.py``, plus the job-side command modules a backend asks for
(EXTENSIONS: dotted module names, e.g. the Slurm backend's node guard). Compute nodes run
it with plain ``python3 launcher_job.pyz COMMAND`` whether or not launcher is installed
there, and programs import ``launcher.jobside`` from it (it is $LAUNCHER_JOB_PYZ).

A job-side command module is stdlib only and defines ``COMMAND`` (its name on the command
line), ``HELP``, ``add_arguments(parser)`` and ``run(args) -> int`` (see
``launcher.jobside.cli``). Its parent packages are packed as empty stubs, so their
``__init__`` (which may import the rest of the backend) never runs on the node.
"""

from __future__ import annotations

import importlib.util
import io
import os
import pkgutil
import re
import zipfile

import launcher
from launcher.checkpoint import CheckpointError
from launcher.checkpoint.posix_io import write_atomic

PACKAGES = ("launcher.checkpoint", "launcher.jobside")  # packed whole: every module in them
_MODULE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*\Z")


def _module_source(modname: str) -> str:
    spec = importlib.util.find_spec(modname)
    src = spec.loader.get_source(modname) if spec and spec.loader else None
    if src is None:
        raise CheckpointError("cannot read the source of %s for the job-side zipapp" % modname)
    return src


def _zip_main(extensions) -> str:
    return ("import sys\nfrom launcher.jobside.cli import main\nsys.exit(main(extensions=%r))\n"
            % (tuple(extensions),))


def _package_files(pkgname: str) -> dict:
    pkg = importlib.import_module(pkgname)
    base = pkgname.replace(".", "/")
    files = {base + "/__init__.py": _module_source(pkgname)}
    for mi in pkgutil.iter_modules(pkg.__path__):
        if not mi.ispkg:
            files["%s/%s.py" % (base, mi.name)] = _module_source("%s.%s" % (pkgname, mi.name))
    return files


def _extension_files(modname: str) -> dict:
    if not _MODULE_NAME.match(modname) or "." not in modname:
        raise CheckpointError("%r: a job-side command module must be a dotted module name inside a package"
                              % (modname,))
    parts = modname.split(".")
    files = {"/".join(parts) + ".py": _module_source(modname)}
    for i in range(1, len(parts)):
        stub = "%s/__init__.py" % "/".join(parts[:i])
        files[stub] = '"""%s: job-side subset (only what the helper needs)."""\n' % ".".join(parts[:i])
    return files


def zip_files(extensions=()) -> dict:
    """{archive name: source} of the helper with EXTENSIONS (pure but for reading sources)."""
    version = getattr(launcher, "__version__", "0")
    files = {}
    for modname in extensions:
        files.update(_extension_files(modname))
    for pkgname in PACKAGES:
        files.update(_package_files(pkgname))  # never replaced by an extension's stub
    files["__main__.py"] = _zip_main(extensions)
    files["launcher/__init__.py"] = ('"""launcher: job-side subset (launcher.jobside, launcher.checkpoint)."""\n\n'
                                     "__version__ = %r\n" % version)
    return files


def stage_zip(dest_path, extensions=()) -> str:
    """Write the helper zipapp (see the module docstring) to DEST_PATH, atomically.
    Byte-for-byte reproducible. Run it with ``python3 DEST <command>``; put it on
    PYTHONPATH to make ``from launcher.jobside import save`` work in a program.
    EXTENSIONS: job-side command modules to pack too. Returns DEST_PATH."""
    extensions = tuple(dict.fromkeys(extensions))
    files = zip_files(extensions)
    raw = io.BytesIO()
    raw.write(b"#!/usr/bin/env python3\n")
    with zipfile.ZipFile(raw, "w", compression=zipfile.ZIP_DEFLATED) as z:
        for arc in sorted(files):
            zi = zipfile.ZipInfo(arc, date_time=(1980, 1, 1, 0, 0, 0))
            zi.external_attr = 0o644 << 16
            zi.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(zi, files[arc])
    dest_path = os.path.abspath(str(dest_path))
    write_atomic(dest_path, raw.getvalue(), 0o755)
    return dest_path
