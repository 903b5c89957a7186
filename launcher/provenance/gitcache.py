"""Reusing a work tree's git identity between launches while nothing in it changed.

``git_identity`` costs six ``git`` processes. Between two launches from the same work
tree usually nothing changed, and that can be checked without git: the identity is
kept with a *stamp* of everything git's answer depends on, and reused only while the
stamp is the same:

* HEAD (its text), the ref it names and ``packed-refs`` (a commit, checkout or reset),
  the index (``git add``, a commit), ``.git/config`` and the exclude files;
* every tracked and untracked (not ignored) file and every folder holding them: an
  edit changes the file's mtime/ctime/size/inode, a new or deleted file its folder's.

Like git's own "racy git" rule, an entry whose stamp holds a time within RACY_SECONDS
of when the identity was captured is not trusted (an edit in the same clock tick as
the capture would keep its mtime), and a tree with submodules or more than MAX_FILES
files is not cached at all. A folder outside any repository is remembered as such until a
``.git`` appears in it or above it. Pure functions (``stamp``, ``reusable``) plus a small
per-process cache; the caller captures with ``capture.git_identity`` on a miss.
"""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass
from typing import Callable, Optional

MAX_FILES = 20000
RACY_SECONDS = 2.0


@dataclass(frozen=True)
class Layout:
    """Where git keeps what the identity depends on, for one work tree."""
    top: str
    git_dir: str
    common_dir: str
    paths: tuple  # tracked + untracked files and their folders, relative to top


def _stat(path: str) -> tuple:
    try:
        st = os.lstat(path)
    except OSError:
        return (path, None)
    return (path, st.st_mtime_ns, st.st_ctime_ns, st.st_size, st.st_ino, st.st_mode)


def _read(path: str) -> Optional[bytes]:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return None


def stamp(layout: Layout) -> tuple:
    """Everything git's answer for LAYOUT depends on, as comparable data."""
    head = _read(os.path.join(layout.git_dir, "HEAD"))
    meta = [("HEAD", head), _stat(os.path.join(layout.git_dir, "index")),
            _stat(os.path.join(layout.common_dir, "packed-refs")), _stat(os.path.join(layout.common_dir, "config")),
            _stat(os.path.join(layout.common_dir, "info", "exclude")),
            _stat(os.path.expanduser("~/.gitconfig")), _stat(os.path.expanduser("~/.config/git/ignore"))]
    if head and head.startswith(b"ref: "):
        ref = head[5:].strip().decode("utf-8", "replace")
        meta.append(_stat(os.path.join(layout.common_dir, ref)))
        meta.append(_stat(os.path.join(layout.git_dir, ref)))
    files = [_stat(os.path.join(layout.top, p)) for p in layout.paths]
    return tuple(meta) + tuple(files)


def newest_time_ns(st: tuple) -> int:
    """The newest mtime/ctime in a stamp (0 when none)."""
    return max((max(e[1], e[2]) for e in st if len(e) > 2 and e[1] is not None), default=0)


def reusable(old_stamp: tuple, captured_ns: int, new_stamp: tuple, racy_ns: int = int(RACY_SECONDS * 1e9)) -> bool:
    """Whether an identity captured at CAPTURED_NS with OLD_STAMP still holds: the stamp is
    unchanged and none of its times is so close to the capture that an edit could hide."""
    if old_stamp != new_stamp:
        return False
    return newest_time_ns(new_stamp) < captured_ns - racy_ns


def _git(args, cwd) -> Optional[bytes]:
    try:
        p = subprocess.run(["git", *args], cwd=cwd, capture_output=True, timeout=30,
                           env={**os.environ, "GIT_OPTIONAL_LOCKS": "0", "LC_ALL": "C"})
    except (OSError, subprocess.TimeoutExpired):
        return None
    return p.stdout if p.returncode == 0 else None


def layout_of(path: str) -> Optional[Layout]:
    """The layout of the work tree holding PATH, or None (not a repository, submodules,
    too many files: such trees are not cached)."""
    out = _git(["rev-parse", "--show-toplevel", "--absolute-git-dir", "--git-common-dir"], path)
    if out is None:
        return None
    lines = out.decode("utf-8", "surrogateescape").splitlines()
    if len(lines) < 3:
        return None
    top, git_dir, common = lines[0], lines[1], lines[2]
    common = os.path.normpath(os.path.join(path, common)) if not os.path.isabs(common) else common
    if os.path.exists(os.path.join(top, ".gitmodules")):
        return None
    listing = _git(["ls-files", "-z", "--cached", "--others", "--exclude-standard"], top)
    if listing is None:
        return None
    files = sorted({os.fsdecode(p) for p in listing.split(b"\0") if p})
    if len(files) > MAX_FILES:
        return None
    dirs = {""}
    for f in files:
        d = os.path.dirname(f)
        while d and d not in dirs:
            dirs.add(d)
            d = os.path.dirname(d)
    return Layout(top, git_dir, common, tuple(sorted(dirs)) + tuple(files))


NOT_A_REPO = "not a git repository"


def outside_stamp(path: str, environ=None) -> tuple:
    """What would make PATH part of a repository: a ``.git`` in it or any folder above it,
    or git's environment (GIT_DIR, GIT_WORK_TREE, GIT_CEILING_DIRECTORIES)."""
    environ = os.environ if environ is None else environ
    out, d = [], os.path.abspath(path)
    while True:
        out.append(_stat(os.path.join(d, ".git")))
        parent = os.path.dirname(d)
        if parent == d:
            break
        d = parent
    return tuple(out) + tuple(environ.get(k) for k in ("GIT_DIR", "GIT_WORK_TREE", "GIT_CEILING_DIRECTORIES"))


_CACHE: dict = {}  # path -> (layout or None when outside git, stamp, captured_ns, identity)


def cached_identity(path: Optional[str], capture: Callable[[Optional[str]], dict],
                    clock: Callable[[], int] = time.time_ns) -> dict:
    """CAPTURE(path) (``capture.git_identity``), reused while the work tree's stamp holds."""
    if not path or not os.path.isdir(path):
        return capture(path)
    key = os.path.realpath(path)
    hit = _CACHE.get(key)
    if hit is not None:
        layout, old, captured_ns, ident = hit
        try:
            if layout is None and old == outside_stamp(path):
                return dict(ident)  # still outside any repository
            if layout is not None and reusable(old, captured_ns, stamp(layout)):
                return dict(ident)
        except OSError:
            pass
    layout = layout_of(path)
    if layout is None:
        _CACHE.pop(key, None)
        before = outside_stamp(path)
        ident = capture(path)
        if ident.get("error") == NOT_A_REPO:
            _CACHE[key] = (None, before, clock(), dict(ident))
        return ident
    captured_ns = clock()
    before = stamp(layout)  # taken before git looks: an edit during the capture changes it
    ident = capture(path)
    if ident.get("error") is None:
        _CACHE[key] = (layout, before, captured_ns, dict(ident))
    return ident


def clear() -> None:
    _CACHE.clear()
