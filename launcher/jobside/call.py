"""``python -m launcher.jobside.call``: run a Python function submitted with ``Launcher.submit``
or ``Launcher.map``, inside the job.

Stdlib only (see ``launcher.jobside``); cloudpickle is imported only when it is installed, and
must be where the payload holds functions pickled by value (it is what ``submit`` pickles with).

The function travels through the job's checkpoint root, which both the launcher and the job
reach (a local path, a shared path, or s3://): ``ROOT/.launcher/call/payload.pkl`` holds
``(fn, args, kwargs)``; this entry unpickles it, calls the function and writes what came of it
to ``ROOT/.launcher/call/result.pkl``, once (temp file then rename on POSIX; one PUT on S3):

    {"ok": True, "value": <pickled value>}
    {"ok": False, "exception": <pickled exception or None>, "type": "module.Name",
     "message": str(e), "traceback": "Traceback (most recent call last): ..."}

The inner values are pickled on their own, so the launcher can always read the record even when
the exception's class exists only on the job's side. Exit 0 when the function returned, 1 when
it raised (the launcher reads that attempt as an application error). ``SystemExit`` (e.g.
``sys.exit(EXIT_PREEMPTED)`` after a checkpoint on a preemption notice) and
``KeyboardInterrupt`` pass through with no result written, so the job is restarted and the
function called again: one that checkpoints through ``launcher.jobside`` resumes there. A
start that finds a result already in (the watch restarted a job whose function raised, within
its app_error budget) does not call the function again: it exits as that call did.
"""

from __future__ import annotations

import argparse
import pickle
import sys
import traceback

from launcher.jobside.env import ckpt_root, store_for

CALL_DIR = ".launcher/call"
PAYLOAD_KEY = CALL_DIR + "/payload.pkl"
RESULT_KEY = CALL_DIR + "/result.pkl"
EXIT_RAISED = 1


def _dumps(obj) -> bytes:
    try:
        import cloudpickle  # by value where the class or function lives only in the job
    except ImportError:
        return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    return cloudpickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)


def failure_record(e: BaseException, tb_text: str) -> dict:
    """The result record of exception E (pure): the exception itself when it pickles, else
    its type, message and traceback only."""
    try:
        blob = _dumps(e)
        pickle.loads(blob)  # an exception whose __init__ takes other arguments pickles but cannot load
    except Exception:  # noqa: BLE001 - any failure: the text still travels
        blob = None
    kind = type(e)
    return {"ok": False, "exception": blob, "type": "%s.%s" % (kind.__module__, kind.__qualname__),
            "message": str(e), "traceback": tb_text}


def run_call(fn, args, kwargs) -> tuple:
    """(record, exit status) of calling FN(*ARGS, **KWARGS); SystemExit and KeyboardInterrupt propagate."""
    try:
        value = fn(*args, **kwargs)
    except Exception as e:  # noqa: BLE001 - the function's failure is the result
        return failure_record(e, traceback.format_exc()), EXIT_RAISED
    try:
        return {"ok": True, "value": _dumps(value)}, 0
    except Exception as e:  # noqa: BLE001 - a value that cannot be pickled: say so as the failure
        err = TypeError("the value %s returned cannot be pickled: %s: %s"
                        % (getattr(fn, "__qualname__", repr(fn)), type(e).__name__, e))
        return failure_record(err, traceback.format_exc()), EXIT_RAISED


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m launcher.jobside.call",
                                description="run the function Launcher.submit staged under the checkpoint root")
    p.add_argument("--root", default=None, help="the checkpoint root (default $LAUNCHER_CKPT_ROOT)")
    a = p.parse_args(argv)
    store = store_for(ckpt_root(a.root))
    data, _ = store.read(PAYLOAD_KEY, limit=None)
    if data is None:
        print("launcher-job: no function to run: %s is missing" % store.url(PAYLOAD_KEY), file=sys.stderr)
        return 2
    done, _ = store.read(RESULT_KEY, limit=None)
    if done is not None:  # an earlier start called it (the watch restarts a job that failed): that is final
        ok = pickle.loads(done).get("ok")
        print("launcher-job: the function's result is already in %s (it %s): not calling it again"
              % (store.url(RESULT_KEY), "returned" if ok else "raised"), file=sys.stderr)
        return 0 if ok else EXIT_RAISED
    fn, args, kwargs = pickle.loads(data)
    record, status = run_call(fn, args, kwargs)
    store.put(RESULT_KEY, pickle.dumps(record, protocol=pickle.HIGHEST_PROTOCOL))
    if status:
        sys.stderr.write(record["traceback"])
    return status


if __name__ == "__main__":
    sys.exit(main())
