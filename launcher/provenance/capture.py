"""Capturing a run's provenance on the submit host (pure data out, no writes).

Each probe tolerates its own failure: a missing ``git``, a folder that is not a
repository, no docker, no SkyPilot: the field is null and an ``error`` / ``reason``
says why. Nothing here talks to the network.
"""

from __future__ import annotations

import functools
import getpass
import hashlib
import json
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
import time
from importlib import metadata
from typing import Optional

import yaml

from launcher import __version__
from launcher.provenance import FORMAT
from launcher.provenance.gitcache import cached_identity

GIT_TIMEOUT = 30.0
# untracked files bigger than this enter the dirty-tree hash by (path, size), not content
UNTRACKED_HASH_LIMIT = 16 << 20


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()


# ---------------------------------------------------------------- code identity
def _git(args, cwd, timeout=GIT_TIMEOUT, binary=False):
    p = subprocess.run(["git", *args], cwd=cwd, capture_output=True, timeout=timeout,
                       env={**os.environ, "GIT_TERMINAL_PROMPT": "0", "GIT_OPTIONAL_LOCKS": "0", "LC_ALL": "C"})
    out = p.stdout if binary else p.stdout.decode("utf-8", "replace")
    return p.returncode, out, p.stderr.decode("utf-8", "replace").strip()


_USERINFO = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*://)[^/@]*@")


def strip_credentials(url: Optional[str]) -> Optional[str]:
    """https://user:token@host/x -> https://host/x (scp-like git@host:x is kept: no secret)."""
    if not url:
        return url
    return _USERINFO.sub(r"\1", url.strip())


def git_identity(path: Optional[str]) -> dict:
    """{"dir", "repo", "commit", "branch", "dirty", "diff_sha256", "changed_files",
    "untracked_files", "remote", "error"} for the git work tree holding PATH.

    ``diff_sha256`` hashes ``git diff HEAD --binary`` plus every untracked (not
    ignored) file's path and content, so two dirty trees with the same hash hold the
    same changes. Not a repository (or no git): commit null and ``error`` says why."""
    out = {"dir": path, "repo": None, "commit": None, "branch": None, "dirty": None, "diff_sha256": None,
           "changed_files": None, "untracked_files": None, "remote": None, "error": None}
    if not path or not os.path.isdir(path):
        out["error"] = f"{path!r} is not a directory" if path else "no directory to look at"
        return out
    try:
        rc, top, err = _git(["rev-parse", "--show-toplevel"], path)
        if rc != 0:
            out["error"] = "not a git repository" if "not a git repository" in err else (err or f"git exit {rc}")
            return out
        top = top.strip()
        out["repo"] = top
        rc, head, err = _git(["rev-parse", "--verify", "-q", "HEAD"], path)
        out["commit"] = head.strip() if rc == 0 and head.strip() else None
        if out["commit"] is None:
            out["error"] = "repository has no commit yet"
        rc, br, _ = _git(["rev-parse", "--abbrev-ref", "HEAD"], path)
        out["branch"] = br.strip() if rc == 0 and br.strip() not in ("", "HEAD") else None
        _worktree_state(out, path, top)
        _remote(out, path)
    except FileNotFoundError:
        out["error"] = "git is not installed"
    except subprocess.TimeoutExpired:
        out["error"] = f"git timed out after {GIT_TIMEOUT:g}s"
    except OSError as e:
        out["error"] = f"git failed: {e}"
    return out


def _worktree_state(out: dict, path: str, top: str) -> None:
    """Fill OUT's dirty / changed_files / untracked_files / diff_sha256 from `git status`."""
    rc, st, err = _git(["status", "--porcelain=v1", "-z", "--untracked-files=all"], path, binary=True)
    if rc != 0:
        out["error"] = err or f"git status exit {rc}"
        return
    entries = [e for e in st.split(b"\0") if e]
    untracked = sorted(e[3:] for e in entries if e.startswith(b"?? "))
    out["dirty"] = bool(entries)
    out["changed_files"] = len(entries) - len(untracked)
    out["untracked_files"] = len(untracked)
    out["diff_sha256"] = _diff_sha256(path, top, untracked, bool(out["commit"])) if entries else None


def _diff_sha256(path: str, top: str, untracked: list, has_commit: bool) -> str:
    """sha256 of `git diff HEAD --binary` plus every untracked file's path and content."""
    h = hashlib.sha256()
    if has_commit:
        _rc, diff, _err = _git(["diff", "HEAD", "--binary", "--no-ext-diff", "--no-color"], path, binary=True)
        h.update(diff)
    for rel in untracked:
        p = os.path.join(top, os.fsdecode(rel))
        h.update(b"\0untracked\0" + rel + b"\0")
        try:
            size = os.path.getsize(p)
            if size <= UNTRACKED_HASH_LIMIT and os.path.isfile(p):
                with open(p, "rb") as f:
                    h.update(hashlib.sha256(f.read()).digest())
            else:
                h.update(str(size).encode())
        except OSError:
            h.update(b"?")
    return h.hexdigest()


def _remote(out: dict, path: str) -> None:
    """OUT's remote (credentials stripped): origin if there is one, else the first remote."""
    rc, remotes, _ = _git(["remote"], path)
    names = remotes.split() if rc == 0 else []
    if names:
        name = "origin" if "origin" in names else names[0]
        rc, url, _ = _git(["remote", "get-url", name], path)
        if rc == 0:
            out["remote"] = strip_credentials(url.strip())
            out["remote_name"] = name


def code_identity(path: Optional[str]) -> dict:
    """``git_identity``, reused between launches while the work tree is unchanged (gitcache)."""
    return cached_identity(path, git_identity)


# ---------------------------------------------------------------- Python environment
def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def installed_packages() -> list[str]:
    """``name==version`` of every installed distribution (pip freeze without the URLs),
    sorted by canonical name. The same list gives the same hash on any machine. Kept per
    process while no folder of ``sys.path`` changed (an install or uninstall adds or
    removes a ``.dist-info`` folder, which changes its folder's mtime)."""
    return list(_packages()[0])


def _packages() -> tuple:
    """(the installed ``name==version`` tuple, its sha256), kept while ``path_stamp`` holds."""
    key = path_stamp(sys.path)
    if _PACKAGES.get("key") != key:
        pkgs = _installed_packages()
        _PACKAGES.update(key=key, packages=pkgs, sha256=sha256_text("\n".join(pkgs) + "\n"))
    return _PACKAGES["packages"], _PACKAGES["sha256"]


_PACKAGES: dict = {}


def path_stamp(entries) -> tuple:
    """(entry, mtime_ns, inode) of every sys.path entry: what tells that the installed set changed."""
    out = []
    for e in entries:
        try:
            st = os.stat(e or ".")
            out.append((e, st.st_mtime_ns, st.st_ino))
        except OSError:
            out.append((e, None, None))
    return tuple(out)


def _installed_packages() -> tuple:
    # Read name and version from the ``name-version.dist-info`` folder name where there is
    # one (parsing ~300 METADATA files costs ~150 ms per launch); METADATA otherwise.
    seen = {}
    for d in metadata.distributions():
        folder = getattr(getattr(d, "_path", None), "name", "")
        m = re.match(r"^([^-]+)-([^-]+)\.dist-info$", folder)
        if m:
            name, version = m.group(1), m.group(2)
        else:
            try:
                name, version = d.metadata["Name"], d.version
            except Exception:  # a broken dist-info: skip it, never fail a launch over it
                continue
        if not name:
            continue
        seen.setdefault(_canonical(name), f"{_canonical(name)}=={version}")
    return tuple(seen[k] for k in sorted(seen))


def python_env() -> dict:
    pkgs, sha = _packages()  # hashed once per installed set, not once per launch
    return {"version": platform.python_version(), "implementation": platform.python_implementation(),
            "executable": sys.executable, "prefix": sys.prefix,
            "packages_sha256": sha, "package_count": len(pkgs), "packages": list(pkgs)}


# ---------------------------------------------------------------- versions
@functools.lru_cache(maxsize=64)
def dist_version(name: str) -> Optional[str]:
    """An installed distribution's version (cached: installs do not change under a process)."""
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None
    except Exception:
        return None


def versions(backend_name: str, facts_data: Optional[dict], backend_version: Optional[str] = None) -> dict:
    """The launcher's version, the backend's (what it reports, ``Host.version``; else the
    probed facts' ``version``), and, kept for comparing runs, Slurm's from the probed facts
    and SkyPilot's if installed (read from its metadata: ``sky`` is never imported)."""
    facts_data = facts_data or {}
    if backend_version is None:
        backend_version = facts_data.get("version")
    return {"launcher": __version__, "launcher_dist": dist_version("launcher"),
            "backend": {"name": backend_name, "version": backend_version},
            "slurm": facts_data.get("slurm_version"), "skypilot": dist_version("skypilot"),
            "python": platform.python_version()}


# ---------------------------------------------------------------- container image
_DIGEST = re.compile(r"@(sha256:[0-9a-f]{64})")


def image_identity(image: Optional[str], docker_timeout: float = 10.0) -> dict:
    """{"name", "digest", "source", "reason"}: the digest when the reference pins one, or
    when the local docker image store knows the image; otherwise null and why (a tag
    resolves to a digest only at the registry, over the network, which is not done)."""
    if not image:
        return {"name": None, "digest": None, "source": None, "reason": "the spec has no image"}
    m = _DIGEST.search(image)
    if m:
        return {"name": image, "digest": m.group(1), "source": "reference", "reason": None}
    path = os.path.expanduser(image)
    if image.startswith(("/", "./", "~")) or image.endswith((".sqsh", ".squashfs", ".sif")):
        size = os.path.getsize(path) if os.path.isfile(path) else None
        return {"name": image, "digest": None, "source": None, "size": size,
                "reason": "a local image file: not hashed at launch" if size is not None
                else "a local image file that is not on this host"}

    docker = shutil.which("docker")
    reason = "resolving a tag to a digest needs the registry (network): not done at launch"
    if docker:
        ref = image.replace("#", "/", 1) if "#" in image else image  # pyxis/enroot "registry#image"
        try:
            p = subprocess.run([docker, "image", "inspect", "--format", "{{json .RepoDigests}}", ref],
                               capture_output=True, text=True, timeout=docker_timeout)
            if p.returncode == 0:
                digests = json.loads(p.stdout.strip() or "[]") or []
                for d in digests:
                    dm = re.search(r"(sha256:[0-9a-f]{64})", d)
                    if dm:
                        return {"name": image, "digest": dm.group(1), "source": "local docker image store",
                                "reason": None}
                reason = "the local docker image has no repo digest (built locally, never pushed or pulled)"
            else:
                reason += "; not in the local docker image store"
        except (OSError, subprocess.TimeoutExpired, ValueError) as e:
            reason += f"; docker image inspect failed: {e}"
    return {"name": image, "digest": None, "source": None, "reason": reason}


# ---------------------------------------------------------------- the record
def code_dir(spec, spec_path: Optional[str]) -> Optional[str]:
    """Where the job's code is: the spec's workdir, else the spec's folder, else cwd."""
    if spec.workdir:
        return os.path.abspath(os.path.expanduser(spec.workdir))
    if spec_path:
        return os.path.dirname(os.path.abspath(spec_path))
    return os.getcwd()


def capture(*, job_id: str, spec, spec_text: str, spec_path: Optional[str], target: str, backend: str,
            facts_data: Optional[dict], request=None, handle=None, seed=None, seed_source=None,
            environ=None, backend_version: Optional[str] = None) -> dict:
    """The provenance record of one run (not yet redacted: ``record`` redacts it).
    BACKEND_VERSION: what the backend says runs its jobs (``Host.version``)."""
    environ = os.environ if environ is None else environ
    t0 = time.monotonic()
    given = _given(spec_text) if spec_text else None
    rendered = None
    if request is not None:
        rendered = {"kind": request.kind, "text": request.text, "sha256": sha256_text(request.text),
                    "files": [{"name": n, "sha256": sha256_text(c if isinstance(c, str) else c.decode("utf-8", "replace"))}
                              for n, c in (request.files or ())]}
    cdir = code_dir(spec, spec_path)
    doc = {
        "format": FORMAT,
        "run": job_id,
        "name": spec.name,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "created_ts": time.time(),
        "submitted_by": {"user": _user(), "host": socket.gethostname(), "cwd": os.getcwd(),
                         "argv": list(sys.argv)},
        "target": target,
        "backend": backend,
        "native_id": getattr(handle, "native_id", None),
        "attempt": getattr(handle, "attempt", None),
        "checkpoint_root": spec.checkpoint.root,
        "spec": {"path": spec_path, "sha256": sha256_text(spec_text or ""), "text": spec_text,
                 "given": given, "resolved": spec.model_dump(mode="json")},
        "rendered": rendered,
        "code": code_identity(cdir),
        "python": python_env(),
        "versions": versions(backend, facts_data, backend_version),
        "image": image_identity(spec.image),
        "seed": seed,
        "seed_source": seed_source,
        "secrets": {"names": list(spec.secrets),
                    "set_at_launch": {n: bool(environ.get(n)) for n in spec.secrets}},
    }
    doc["capture_seconds"] = round(time.monotonic() - t0, 6)
    return doc


def _given(spec_text: str):
    """The spec text as parsed YAML (None when it does not parse)."""
    try:
        return yaml.load(spec_text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError:
        return None


def _user() -> Optional[str]:
    """getpass.getuser(), or None when it cannot tell."""
    try:
        return getpass.getuser()
    except Exception:
        return None
