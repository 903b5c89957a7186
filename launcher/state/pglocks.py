"""The writers' lock of a team's PostgreSQL store, which no member of the team can take hostage
(issue 28; docs/team-store.md, "No one can stop the team's writes"). Pure: SQL text only.

SQLite lets one writer at a time into its file; the PostgreSQL store keeps that property with
one lock every write transaction takes first (``launcher.state.pg``). Until schema 3 that was
an advisory lock, which any role of the database may take with ``pg_advisory_lock`` and hold
for ever (a launcher frozen inside its transaction did: every launch and every watcher's pass
waited on it). Now:

* The lock is the row of ``launcher_writer``, a table only the store's owner may read or lock
  (no privilege is granted on it). A writer takes it through ``launcher_write_lock(wait,
  idle, hold)``, a ``SECURITY DEFINER`` function (run as the owner; EXECUTE granted to
  ``launcher_team`` only), as ``SELECT ... FOR UPDATE``: held to the end of the caller's
  transaction, released by its COMMIT or ROLLBACK, exactly as the advisory lock was.
* The writes of named jobs (a claim, a job's status, a submission's record, a close:
  ``StateStore.tx(jobs=...)``) take it shared instead, through ``launcher_write_share``
  (``FOR SHARE``), and then lock those jobs' rows (``SELECT ... FOR UPDATE``, in id order):
  two watchers writing different jobs no longer wait for each other, two writing one job
  still do, and a whole-lock writer (a sweep's slot accounting, gc, a migration's peers)
  still sees a store no one else is writing (docs/team-store.md, "What the writers' lock
  serialises").
* A writer that finds it taken waits in slices of at most half a second, and between slices
  ends (``pg_terminate_backend``) every session that holds a lock on the store's tables
  (stronger than a reader's) while it is idle inside its transaction for longer than IDLE
  seconds, or whose transaction has lasted longer than HOLD seconds (the claim TTL): a frozen
  launcher, or a person's own session that took the function, a table lock (``LOCK TABLE``)
  or a row lock and sat on it. Its transaction is rolled back whole, as a crash's would be.
* It also does so once before taking a free lock when such a session exists; and each launcher
  process runs a watchdog (``launcher.state.pg.Watchdog``) that does it while one of its
  statements waits longer than IDLE on another lock (a person's ``LOCK TABLE jobs``, a row lock).
* Whatever a caller passes, a session counts as a hostage only once idle for MIN_IDLE_S inside
  its transaction, or in a transaction older than MIN_HOLD_S: a member calling the functions
  by hand cannot end the others' ordinary transactions.
* After WAIT seconds it gives up with SQLSTATE 55P03 (lock_not_available) and one line naming
  the lock and who holds it (role, pid, application, what it is doing and for how long).

The launcher's own sessions also set ``idle_in_transaction_session_timeout`` (IDLE) and
``lock_timeout`` (the busy timeout), so the server ends a frozen launcher's transaction by
itself. Ending other roles' sessions needs the owner to be a superuser or a member of
``pg_signal_backend`` (and ``pg_read_all_stats`` to see how long they have been idle); without
it, waits are still bounded by WAIT and name the holder.
"""

from __future__ import annotations

from launcher.state.team import TEAM_ROLE, ident

WRITER_TABLE = "launcher_writer"
# the writers' lock, taken whole (one writer at a time: every write but a job's own) or shared (the
# writes of named jobs, each also locking those jobs' rows: launcher.state.store, ``StateStore.tx``)
LOCK_FUNCTIONS = (("launcher_write_lock", "FOR UPDATE"), ("launcher_write_share", "FOR SHARE"))
SLICE_MS = 500  # the longest single wait between two looks at who holds the lock
# the least idle time and transaction age that make a session a hostage, whatever a caller asks:
# a member calling the functions by hand cannot end the others' ordinary write transactions
MIN_IDLE_S = 1.0
MIN_HOLD_S = 60.0


def statements(schema: str) -> list[str]:
    """The lock's table and functions in SCHEMA, in order; each idempotent (run by every migration)."""
    s = ident(schema)
    hostages = f"""
      SELECT a.pid, a.usename::text AS who, a.application_name AS app, a.state,
             extract(epoch FROM clock_timestamp() - a.state_change) AS idle_s,
             extract(epoch FROM clock_timestamp() - a.xact_start) AS held_s
        FROM pg_catalog.pg_stat_activity a
       WHERE a.datname = pg_catalog.current_database() AND a.pid <> pg_catalog.pg_backend_pid()
         AND a.xact_start IS NOT NULL
         AND ((a.state LIKE 'idle in transaction%' AND a.state_change < clock_timestamp() - idle_limit)
              OR a.xact_start < clock_timestamp() - hold_limit)
         AND EXISTS (SELECT 1 FROM pg_catalog.pg_locks l JOIN pg_catalog.pg_class c ON c.oid = l.relation
                      WHERE l.pid = a.pid AND l.granted AND l.mode <> 'AccessShareLock'
                        AND c.relnamespace = (SELECT n.oid FROM pg_catalog.pg_namespace n WHERE n.nspname = {_lit(schema)}))"""
    return [
        f"CREATE TABLE IF NOT EXISTS {s}.{WRITER_TABLE} (id INT PRIMARY KEY CHECK (id = 1))",
        f"INSERT INTO {s}.{WRITER_TABLE}(id) VALUES (1) ON CONFLICT (id) DO NOTHING",
        f"REVOKE ALL ON {s}.{WRITER_TABLE} FROM PUBLIC",
        # who holds the lock now: the transaction whose id is the row's locker (its xmax), if it still runs
        f"""CREATE OR REPLACE FUNCTION {s}.launcher_writer_holder() RETURNS text
  LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE h record;
BEGIN
  SELECT a.pid, a.usename::text AS who, a.application_name AS app, coalesce(a.state, 'unknown') AS state,
         round(extract(epoch FROM clock_timestamp() - coalesce(a.xact_start, a.backend_start))::numeric, 1) AS held_s
    INTO h
    FROM {s}.{WRITER_TABLE} w
    JOIN pg_locks l ON l.locktype = 'transactionid' AND l.transactionid = w.xmax AND l.granted
                   AND l.mode = 'ExclusiveLock'
    JOIN pg_stat_activity a ON a.pid = l.pid
   WHERE w.id = 1 AND a.pid <> pg_backend_pid();
  IF NOT FOUND THEN
    RETURN 'no single session now (the writes of several jobs may share it)';
  END IF;
  RETURN format('role %s (pid %s, application %L, %s, in its transaction for %s s)',
                h.who, h.pid, h.app, h.state, coalesce(h.held_s::text, '?'));
END $$""",
        # end the sessions that hold a lock on the store's tables and sit on it (see the module's docstring)
        f"""CREATE OR REPLACE FUNCTION {s}.launcher_end_hostages(idle_s double precision, hold_s double precision)
  RETURNS integer LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  idle_limit interval := make_interval(secs => greatest(idle_s, {MIN_IDLE_S}));
  hold_limit interval := make_interval(secs => greatest(hold_s, {MIN_HOLD_S}));
  h record; n integer := 0;
BEGIN
  FOR h IN {hostages} LOOP
    BEGIN
      IF pg_terminate_backend(h.pid) THEN
        n := n + 1;
        RAISE WARNING 'launcher: ended the session of role % (pid %, application %, %, idle % s, in its '
                      'transaction % s): it held a lock on the team''s store', h.who, h.pid, h.app, h.state,
                      round(h.idle_s::numeric, 1), round(h.held_s::numeric, 1);
      END IF;
    EXCEPTION WHEN insufficient_privilege THEN
      NULL;  -- the owner may not signal it (not a superuser, not in pg_signal_backend): waits stay bounded
    END;
  END LOOP;
  RETURN n;
END $$""",
        *(_lock_function(s, name, mode) for name, mode in LOCK_FUNCTIONS),
        *(f"REVOKE ALL ON FUNCTION {s}.{name}(double precision, double precision, double precision) FROM PUBLIC"
          for name, _ in LOCK_FUNCTIONS),
        f"REVOKE ALL ON FUNCTION {s}.launcher_end_hostages(double precision, double precision) FROM PUBLIC",
        f"REVOKE ALL ON FUNCTION {s}.launcher_writer_holder() FROM PUBLIC",
        f"""DO $$
BEGIN
  IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = '{TEAM_ROLE}') THEN
    GRANT EXECUTE ON FUNCTION {s}.launcher_write_lock(double precision, double precision, double precision),
                              {s}.launcher_write_share(double precision, double precision, double precision),
                              {s}.launcher_end_hostages(double precision, double precision),
                              {s}.launcher_writer_holder() TO {TEAM_ROLE};
  END IF;
END $$""",
    ]


def _lock_function(s: str, name: str, mode: str) -> str:
    """The function NAME that takes the writers' lock in MODE (FOR UPDATE: whole; FOR SHARE:
    beside the other shared holders, excluding a whole one), in schema S (already quoted)."""
    return f"""CREATE OR REPLACE FUNCTION {s}.{name}(wait_s double precision, idle_s double precision,
                                                  hold_s double precision)
  RETURNS void LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  deadline timestamptz := clock_timestamp() + make_interval(secs => wait_s);
  idle_limit interval := make_interval(secs => greatest(idle_s, {MIN_IDLE_S}));
  hold_limit interval := make_interval(secs => greatest(hold_s, {MIN_HOLD_S}));
  before text := current_setting('lock_timeout');
  slice integer;
BEGIN
  PERFORM 1 FROM {s}.{WRITER_TABLE} WHERE id = 1 {mode} SKIP LOCKED;
  IF FOUND THEN
    -- free: end first any session sitting on a lock of the store's tables (rare: one look at the sessions)
    IF EXISTS (SELECT 1 FROM pg_stat_activity a
                WHERE a.datname = current_database() AND a.pid <> pg_backend_pid() AND a.xact_start IS NOT NULL
                  AND ((a.state LIKE 'idle in transaction%' AND a.state_change < clock_timestamp() - idle_limit)
                       OR a.xact_start < clock_timestamp() - hold_limit)) THEN
      PERFORM {s}.launcher_end_hostages(idle_s, hold_s);
    END IF;
    RETURN;
  END IF;
  LOOP
    PERFORM {s}.launcher_end_hostages(idle_s, hold_s);
    slice := floor(least({SLICE_MS}, extract(epoch FROM deadline - clock_timestamp()) * 1000))::integer;
    IF slice < 1 THEN
      RAISE EXCEPTION USING ERRCODE = 'lock_not_available',
        MESSAGE = format('the team store''s writers'' lock was not granted within %s s: it is held by %s',
                         wait_s, {s}.launcher_writer_holder());
    END IF;
    BEGIN
      PERFORM set_config('lock_timeout', slice::text, true);
      PERFORM 1 FROM {s}.{WRITER_TABLE} WHERE id = 1 {mode};
      PERFORM set_config('lock_timeout', before, true);
      RETURN;
    EXCEPTION WHEN lock_not_available THEN
      NULL;  -- (the slice's setting was rolled back with it) look again
    END;
  END LOOP;
END $$"""


def _lit(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def begin_write(wait_s: float, idle_s: float, hold_s: float, shared: bool = False) -> str:
    """The statements that open a write transaction (SQLite's BEGIN IMMEDIATE), with the writers'
    lock whole, or SHARED (a job's own writes, which lock the job's rows besides). Pure."""
    name = LOCK_FUNCTIONS[1 if shared else 0][0]
    return f"BEGIN; SELECT {name}({float(wait_s)!r}, {float(idle_s)!r}, {float(hold_s)!r})"
