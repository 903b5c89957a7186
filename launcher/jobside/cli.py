"""The job-side commands: ``python3 launcher_job.pyz CMD`` or ``python -m launcher.jobside CMD``.

Stdlib only (see ``launcher.jobside``). Supports Python 3.8+. Commands::

    resume-env [--root ROOT] [--job-id ID] [--attempt-hint N] [--verify]
        Run at EVERY start of the job, inside the job:
            env_lines=$(python3 launcher_job.pyz resume-env --root "$ROOT") || exit 1
            eval "$env_lines"
        Resolves the latest committed checkpoint, starts a new generation with
        compare-and-swap (recording the step it resumes from) and prints shell-quoted
            export LAUNCHER_CKPT_ROOT=...     the root, absolute
            export LAUNCHER_GENERATION=...    the new generation G ($LAUNCHER_ATTEMPT,
                                              the launcher's attempt, is left alone)
            export LAUNCHER_RESUME_FROM=...   checkpoint dir or s3:// URL; '' on a fresh start
            export LAUNCHER_RESUME_STEP=...   its step; -1 on a fresh start
            export LAUNCHER_RESUME_TIER=...   with $LAUNCHER_CKPT_LOCAL: local, peer or durable
                                              (the farthest tier a rank's part comes from)
        Exit 1 (and nothing on stdout) if ROOT is unusable. ROOT defaults to
        $LAUNCHER_CKPT_ROOT, the job id to $LAUNCHER_JOB_ID, the hint to $LAUNCHER_ATTEMPT
        (the new generation is max(recorded + 1, hint)).
        With --fresh (or $LAUNCHER_FRESH=1: the job was launched with --fresh) the
        job's first start (no generation of its job id recorded yet) starts over above
        every existing generation, so every older checkpoint becomes stale; its
        later starts resume its own checkpoints.
    latest [--root ROOT] [--verify] [--step]
        JSON {"path","step","generation","state","reason"} of the checkpoint a restart
        would resume from, or null; with --step only its step (-1 if none). Exit 0 either way.
        With $LAUNCHER_CKPT_LOCAL: the newest step complete in a tier this node reaches
        (local, peer or ROOT), with "tier" (so does wait-commit).
    wait-commit [--root ROOT] --since-step N --timeout S [--interval S]
        Poll until a committed checkpoint with step > N exists (prints its JSON, exit 0),
        or S seconds pass (exit 1). N may be '' or -1 (any commit). Exit 2 if ROOT is unusable.
        On a preemption notice, take N *before* forwarding the signal, so a periodic
        checkpoint committed earlier does not count as the emergency one:
            since=$(python3 launcher_job.pyz latest --step)
            kill -USR1 "$child"
            python3 launcher_job.pyz wait-commit --since-step "$since" --timeout "$grace"
    gc [--root ROOT] --keep N [--dry-run] [--json]
        See ``launcher checkpoints --help``.
    start-claim --job-dir DIR --attempt N [--self ID]
        Claim attempt N's start once (``launcher.jobside.startclaim``): exit 0 when this
        job (ID, default $LAUNCHER_SELF_ID) may run, 3 when another job started it.
    stage DEST
        Write this helper as a zipapp to DEST (with the same command modules).

A backend adds its own commands by staging the helper with job-side command modules
(``launcher.jobside.zipapp``): the Slurm backend adds ``node-guard``. Each module defines
``COMMAND``, ``HELP``, ``add_arguments(parser)`` and ``run(args) -> int``; the zipapp's
``__main__`` passes their names to ``main(extensions=...)``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import shlex
import sys
import time
from datetime import datetime, timezone

from launcher.checkpoint import (CheckpointError, RootUnavailable, gc as _gc, latest as _latest, open_store,
                                 read_generations, record_rejoin, start_generation)
from launcher.checkpoint import scratch as _scratch

from launcher.checkpoint import tier_resume as _resume
from launcher.jobside import injob, startclaim, tiered as _tiered
from launcher.jobside.env import GENERATION_ENV, PROG, ckpt_root, env_int, generation_env
from launcher.jobside.zipapp import stage_zip


def export_lines(env) -> str:
    return "".join("export %s=%s\n" % (k, shlex.quote(str(v))) for k, v in env)


def _resolver(cfg):
    """With checkpoint tiers (CFG), how a start finds the nearest complete copy of every rank's
    part; None: ROOT alone."""
    if cfg is None:
        return None

    def resolver(st, gens_, verify, log_, seen_):
        return _resume.resolve_for(st, cfg.layout, gens_, verify, log_, seen_)
    return resolver


def resume_messages(generation: int, root: str, rec: dict, log: list, found, tier) -> list:
    """What a start tells the job's log: that it starts over (--fresh), the newer checkpoints it
    skipped (LOG, five at most), and what it resumes from (FOUND, in TIER) or that it starts fresh."""
    out = []
    if rec.get("fresh") is True:
        out.append("%s: generation %d starts over (the job was launched with --fresh): every checkpoint of an "
                   "earlier generation under %s stays on disk and is never resumed from" % (PROG, generation, root))
    skipped = [e for e in log if not e.committed]
    out += ["%s: skipped %s: %s" % (PROG, e.path, e.reason) for e in skipped[:5]]
    if len(skipped) > 5:
        out.append("%s: skipped %d more newer checkpoints" % (PROG, len(skipped) - 5))
    if found:
        out.append("%s: generation %d resumes from %s (step %d%s)" % (PROG, generation, found.path, found.step,
                                                                      ", %s tier" % tier if tier else ""))
    elif rec.get("fresh") is not True:
        out.append("%s: generation %d starts fresh (no committed checkpoint under %s)" % (PROG, generation, root))
    return out


def resume_exports(root: str, generation: int, found, tier, tiered: bool) -> list:
    """The job's resume variables: its root, generation, what it resumes from (and, with checkpoint
    tiers, from which tier)."""
    return [("LAUNCHER_CKPT_ROOT", root),
            (GENERATION_ENV, generation),
            ("LAUNCHER_RESUME_FROM", found.path if found else ""),
            ("LAUNCHER_RESUME_STEP", found.step if found else -1),
            ] + ([("LAUNCHER_RESUME_TIER", tier if found else "")] if tiered else [])


def cmd_resume_env(a) -> int:
    hint = a.attempt_hint if a.attempt_hint is not None else env_int("LAUNCHER_ATTEMPT")
    job_id = a.job_id or os.environ.get("LAUNCHER_JOB_ID") or None
    fresh = a.fresh or os.environ.get("LAUNCHER_FRESH", "").strip() == "1"
    sys.stdout.write(export_lines(start_exports(open_store(ckpt_root(a.root)), job_id, hint, a.verify, fresh)))
    sys.stdout.flush()
    return 0


def start_exports(store, job_id=None, hint=None, verify=False, fresh=False, extra=None) -> list:
    """Start a new generation under STORE's root resuming from the nearest committed checkpoint
    (what resume-env does; EXTRA: more fields for its records, an in-job restart's); the
    [(name, value)] to export, its story on stderr."""
    store.check_root(create=True)
    if not store.is_local:
        for p in _scratch.clean_stale(store.root):  # left by a save or restore killed with -9
            print("%s: removed stale staging %s" % (PROG, p), file=sys.stderr)
    cfg = _tiered.config()  # multi-tier: the nearest complete copy of every rank's part
    gens, found, log = start_generation(store, job_id=job_id, hint=hint, verify=verify, fresh=fresh,
                                        resolver=_resolver(cfg), extra=extra)
    rec = gens.record(gens.generation) or {}
    tier = rec.get("resume_tier") if cfg is not None else None
    if cfg is not None and found is not None:
        _resume.write_resolution(store, gens.generation, found)
    for line in resume_messages(gens.generation, store.root, rec, log, found, tier):
        print(line, file=sys.stderr)
    return resume_exports(store.root, gens.generation, found, tier, cfg is not None)


def cmd_in_job_restart(a) -> int:
    """Exit 0 and print export lines (the new generation's, LAUNCHER_IN_JOB_RESTARTS and the
    job script's _launcher_in_job_history) to restart; exit 1 with the reason on stderr to
    hand the failure over to the launcher's own recovery."""
    now = time.time()
    if a.reap_group:
        injob.reap_group()
    store = open_store(ckpt_root(a.root))
    history = injob.parse_history(a.history)
    latest = newest(store)
    committed = latest.step if latest is not None else -1
    ok, why = injob.decide(a.rc, history, now, a.max_restarts, a.window, committed)
    if not ok:
        print("%s: in-job recovery gives up: %s; the launcher's recovery takes over" % (PROG, why), file=sys.stderr)
        return 1
    gen = generation_env()
    failed_at = datetime.fromtimestamp(now, timezone.utc).isoformat().replace("+00:00", "Z")
    print("%s: %s" % (PROG, why), file=sys.stderr)
    if a.rejoin_group is not None:
        return _rejoin(store, gen, a.rejoin_group, a.rc, failed_at, history, now, latest)
    rec = read_generations(store).record(gen) if gen is not None else None
    hint = (rec or {}).get("attempt")
    extra = {"in_job": {"restart": len(history) + 1, "exit": a.rc, "previous_generation": gen,
                        "failed_at": failed_at}}
    exports = start_exports(store, job_id=os.environ.get("LAUNCHER_JOB_ID") or None,
                                hint=hint if isinstance(hint, int) else gen, extra=extra)
    step = dict(exports).get("LAUNCHER_RESUME_STEP", -1)
    exports += [("LAUNCHER_IN_JOB_RESTARTS", len(history) + 1),
                ("_launcher_in_job_history", injob.format_history(history + [(now, int(step))]))]
    sys.stdout.write(export_lines(exports))
    sys.stdout.flush()
    return 0


def _rejoin(store, gen, group, rc, failed_at, history, now, latest) -> int:
    """One replica group's step failed and is restarted alone (recovery.in_job kind torchft): the
    other groups train on under generation GEN, so no new generation is started (it would fence
    their writes); the restart is recorded in GEN's record (``rejoins``) and the rejoining group
    heals from a live peer. Prints the job script's counters, and the newest commit (LATEST) as
    the group's resume point: with no live peer to heal from (every group failed together, as
    when a hang's processes are all killed) the groups go on from it, not from the attempt's
    start (a fresh start would also run into the generation's committed steps: write-once)."""
    committed = latest.step if latest is not None else -1
    if gen is None:
        print("%s: in-job recovery gives up: no %s to record replica group %d's restart under; the "
              "launcher's recovery takes over" % (PROG, GENERATION_ENV, group), file=sys.stderr)
        return 1
    n = len(history) + 1
    record_rejoin(store, gen, {"group": group, "restart": n, "exit": rc, "failed_at": failed_at,
                               "committed_step": committed})
    print("%s: replica group %d restarts in generation %d and rejoins the groups that went on (newest commit: %s)"
          % (PROG, group, gen, "none" if committed < 0 else "step %d" % committed), file=sys.stderr)
    exports = [("LAUNCHER_IN_JOB_RESTARTS", n),
               ("_launcher_in_job_history", injob.format_history(history + [(now, committed)]))]
    if latest is not None:
        exports += [("LAUNCHER_RESUME_FROM", latest.path), ("LAUNCHER_RESUME_STEP", latest.step)]
    sys.stdout.write(export_lines(exports))
    sys.stdout.flush()
    return 0


class _Complete:
    """A tier Resolution shown as ``latest`` shows an Entry."""

    def __init__(self, res):
        self.step, self.path = res.step, res.path
        self.doc = {"path": res.path, "step": res.step, "generation": res.generation, "state": "committed",
                    "reason": "every rank's part complete; the farthest in the %s tier" % res.tier, "tier": res.tier}

    def to_dict(self):
        return self.doc


def newest(store, verify=False):
    """What a restart would resume from: with a local tier ($LAUNCHER_CKPT_LOCAL) the newest
    step complete in any tier this node reaches (so a save on notice counts once it is
    committed locally), else the newest committed in ROOT."""
    cfg = _tiered.config()
    if cfg is None:
        return _latest(store, verify=verify)
    res = _resume.resolve_for(store, cfg.layout, verify=verify)
    return _Complete(res) if res is not None else None


def cmd_latest(a) -> int:
    e = newest(open_store(ckpt_root(a.root)), verify=a.verify)
    if a.step:
        print(e.step if e else -1)
    else:
        print(json.dumps(e.to_dict() if e else None))
    return 0


def cmd_wait_commit(a) -> int:
    since = -1 if str(a.since_step).strip() == "" else int(a.since_step)
    store = open_store(ckpt_root(a.root))
    deadline = time.monotonic() + max(0.0, a.timeout)
    last_err = None
    while True:
        try:
            e = newest(store)
            last_err = None
        except RootUnavailable:
            raise
        except Exception as err:  # transient (network): keep polling until the deadline
            e, last_err = None, err
        if e is not None and e.step > since:
            print(json.dumps(e.to_dict()))
            return 0
        left = deadline - time.monotonic()
        if left <= 0:
            print("%s: no commit newer than step %d under %s within %gs%s"
                  % (PROG, since, store.root, a.timeout, " (last error: %s)" % last_err if last_err else ""),
                  file=sys.stderr)
            return 1
        time.sleep(min(a.interval, left))


def cmd_gc(a) -> int:
    store = open_store(ckpt_root(a.root))
    store.check_root()
    rep = _gc(store, a.keep, dry_run=a.dry_run)
    if a.json:
        print(json.dumps(rep, indent=1))
    else:
        for k in ("deleted", "quarantined", "skipped"):
            for x in rep[k]:
                print("%s%s %s%s" % ("would " if a.dry_run and k != "skipped" else "", k[:-1] if k != "skipped"
                                     else "skipped", x if isinstance(x, str) else x["path"],
                                     "" if isinstance(x, str) else ": " + x["reason"]))
        print("kept %d committed" % len(rep["kept"]))
    return 0


def cmd_stage(a) -> int:
    print(stage_zip(a.dest, a.extensions))
    return 0


def _parser(extensions=()):
    p = argparse.ArgumentParser(prog=PROG, description="Job-side checkpoint helper (stdlib only).")
    sub = p.add_subparsers(dest="cmd")
    sub.required = True

    def root_arg(sp):
        sp.add_argument("--root", default=None, help="checkpoint ROOT (default: $LAUNCHER_CKPT_ROOT)")

    sp = sub.add_parser("resume-env", help="start a new generation; print export lines for eval")
    root_arg(sp)
    sp.add_argument("--job-id", default=None)
    sp.add_argument("--attempt-hint", type=int, default=None)
    sp.add_argument("--verify", action="store_true", help="check sha256 of the chosen checkpoint too")
    sp.add_argument("--fresh", action="store_true",
                    help="the job was launched with --fresh (default: $LAUNCHER_FRESH=1): its first start "
                         "resumes from nothing and makes every older checkpoint stale")
    sp.set_defaults(fn=cmd_resume_env)

    sp = sub.add_parser("latest", help="print the latest committed checkpoint as JSON (or null)")
    root_arg(sp)
    sp.add_argument("--verify", action="store_true")
    sp.add_argument("--step", action="store_true", help="print only its step (-1 if none)")
    sp.set_defaults(fn=cmd_latest)

    sp = sub.add_parser("wait-commit", help="wait for a commit newer than --since-step")
    root_arg(sp)
    sp.add_argument("--since-step", required=True)
    sp.add_argument("--timeout", type=float, required=True)
    sp.add_argument("--interval", type=float, default=0.5)
    sp.set_defaults(fn=cmd_wait_commit)

    sp = sub.add_parser("gc", help="keep N committed checkpoints, quarantine torn ones")
    root_arg(sp)
    sp.add_argument("--keep", type=int, required=True)
    sp.add_argument("--dry-run", action="store_true")
    sp.add_argument("--json", action="store_true")
    sp.set_defaults(fn=cmd_gc)

    for mod in (startclaim,) + tuple(extensions):
        sp = sub.add_parser(mod.COMMAND, help=mod.HELP)
        mod.add_arguments(sp)
        sp.set_defaults(fn=mod.run)

    sp = sub.add_parser(injob.COMMAND, help=injob.HELP)
    injob.add_arguments(sp)
    sp.set_defaults(fn=cmd_in_job_restart)

    sp = sub.add_parser("stage", help="write this helper as a zipapp")
    sp.add_argument("dest")
    sp.set_defaults(fn=cmd_stage, extensions=tuple(m.__name__ for m in extensions))
    return p


def load_extensions(names) -> list:
    """The job-side command modules NAMES, each checked for what a command needs."""
    mods = []
    for name in names:
        mod = importlib.import_module(name)
        missing = [x for x in ("COMMAND", "HELP", "add_arguments", "run") if not hasattr(mod, x)]
        if missing:
            raise ImportError("%s is not a job-side command module: it lacks %s" % (name, ", ".join(missing)))
        mods.append(mod)
    return mods


def main(argv=None, extensions=()) -> int:
    """Run one job-side command. EXTENSIONS: the job-side command modules this helper was
    staged with (the zipapp's __main__ passes them)."""
    a = _parser(load_extensions(extensions)).parse_args(argv)
    try:
        return a.fn(a)
    except RootUnavailable as e:
        print("%s: error: %s" % (PROG, e), file=sys.stderr)
        return 2 if a.cmd == "wait-commit" else 1
    except (CheckpointError, ValueError) as e:
        print("%s: error: %s" % (PROG, e), file=sys.stderr)
        return 1
    except OSError as e:  # a full disk, a read-only or vanished file system: one line, no traceback
        where = " ".join(str(x) for x in (e.filename, e.filename2) if x)
        print("%s: error: %s%s" % (PROG, where + ": " if where else "", e.strerror or e), file=sys.stderr)
        return 1

