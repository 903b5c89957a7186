"""Each person's jobs are their own on a team's PostgreSQL store, enforced by the server's
row-level security (issue 23, §3; docs/team-store.md). Pure: SQL text only, no driver.

Each person connects as a PostgreSQL role of their own. ``jobs`` and ``sweeps`` carry an
``owner`` column filled from the connecting role (``DEFAULT current_user``); every other table
of the store names its job in ``job_id`` (a claim of a sweep: ``sweep:<id>``) and is covered
through that job's (or sweep's) owner. The policies:

* **read**: a person reads the team's rows when the team's setting ``read`` is ``team`` (the
  default: ``launcher_settings``, written by the store's owner only), else only their own;
* **act** (INSERT, UPDATE, DELETE; and so claim, cancel, resubmit, record): only on their own
  jobs. A row of someone else's job is invisible to an UPDATE or a DELETE (it changes
  nothing), and an INSERT naming it is refused by the server;
* **the watcher's role**: a member of ``launcher_watcher`` reads and acts on every job.
  The store's owner (the role that created the tables), a superuser and a role with
  BYPASSRLS are not subject to the policies at all (PostgreSQL's rule).

A row with no job behind it (a spot observation of no attempt, an event of a job gone) may be
written by anyone, as before; so may ``watchers`` (``SHARED``: each watcher's heartbeat).
``target_polls`` (``WATCHERS_ONLY``: the statuses a poller publishes, acted on by every
watcher) is read and written by the watchers' role alone. The
group roles ``launcher_team`` (what every person is a member of: the table privileges are
granted to it) and ``launcher_watcher`` are created by the
migration when the migrating role may create roles; else the administrator creates them and
the next migration grants to them. PostgreSQL only: the SQLite store belongs to one person.
"""

from __future__ import annotations

SECURITY_VERSION = 2  # launcher_schema.security: the policies below and the writers' lock functions (2: its
# shared form, launcher.state.pglocks); PostgreSQL only
TEAM_ROLE = "launcher_team"
WATCHER_ROLE = "launcher_watcher"
OWNED = ("jobs", "sweeps")  # tables with an owner column
HOMES_TABLE = "job_homes"  # the $LAUNCHER_HOME each job was launched from (StateStore.job_dir)
# tables covered through the owner of the job (or sweep) their job_id names
BY_JOB = ("attempts", "events", "claims", "provenance", "notifications", "spot_observations", HOMES_TABLE,
          "watch_marks")
META = ("launcher_schema", "launcher_settings")  # read by every person, written by the store's owner
# read and written by every person, no row-level security: no job behind a row (each watcher's
# heartbeat: launcher.state.watchers; a person's own watcher writes its row as that person)
SHARED = ("watchers",)
# read and written by the watchers' role only (and the store's owner): the pollers' leases and
# the statuses they publish, which every watcher acts on (launcher.state.polls)
WATCHERS_ONLY = ("target_polls",)
# bad nodes remembered (launcher.state.nodes), no row-level security (no job behind a row): every
# member reads them, records a blame and quarantines (SELECT, INSERT, UPDATE); releasing a node
# (DELETE) is for the watchers' role (and the store's owner)
NODES = ("node_blames", "node_quarantine")


def ident(name: str) -> str:
    """NAME as a quoted SQL identifier."""
    return '"' + name.replace('"', '""') + '"'


def statements(schema: str) -> list[str]:
    """The row-level security of a store in SCHEMA (a PostgreSQL schema name), in order; each
    idempotent (run again by every migration)."""
    s = ident(schema)
    act_own = f"(owner = current_user OR (SELECT {s}.launcher_acts_on_all()))"
    act_job = (f"((SELECT {s}.launcher_acts_on_all()) OR job_id IS NULL "
               f"OR NOT {s}.launcher_owned_by_other(job_id, current_user::text))")  # launcher_may_act, spelled out
    out = [  # the owner columns first: the functions below read them
        *(f"ALTER TABLE {s}.{t} ADD COLUMN IF NOT EXISTS owner TEXT COLLATE \"C\" NOT NULL DEFAULT current_user"
          for t in OWNED),
        # who wrote each event (a cancel, a resubmission, a close): the connecting role, filled by the server
        # as the owner columns are (launcher.state.actors), so no writer can leave it out
        f"ALTER TABLE {s}.events ALTER COLUMN actor SET DEFAULT current_user",
        f"CREATE TABLE IF NOT EXISTS {s}.launcher_settings (name TEXT PRIMARY KEY, value TEXT NOT NULL)",
        # the $LAUNCHER_HOME each job was launched from (StateStore.job_dir: watchers with homes of their own)
        f"CREATE TABLE IF NOT EXISTS {s}.job_homes (job_id TEXT COLLATE \"C\" PRIMARY KEY, home TEXT NOT NULL)",
        f"INSERT INTO {s}.launcher_settings(name, value) VALUES ('read', 'team') ON CONFLICT (name) DO NOTHING",
        # a member of launcher_watcher acts on every job (false while that role does not exist)
        # (PL/pgSQL where a function runs per statement or per row: its plans are cached for the
        # session, where a SQL function that is not inlined is planned again at every call)
        f"""CREATE OR REPLACE FUNCTION {s}.launcher_acts_on_all() RETURNS boolean LANGUAGE plpgsql STABLE AS $$
BEGIN
  RETURN EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = '{WATCHER_ROLE}')
         AND pg_catalog.pg_has_role('{WATCHER_ROLE}', 'MEMBER');
END $$""",
        f"""CREATE OR REPLACE FUNCTION {s}.launcher_reads_all() RETURNS boolean LANGUAGE sql STABLE AS $$
  SELECT {s}.launcher_acts_on_all()
      OR COALESCE((SELECT value = 'team' FROM {s}.launcher_settings WHERE name = 'read'), true) $$""",
        # whether NAME (a job, a sweep, a sweep's claim) belongs to a role other than ME: read as
        # the tables' owner (SECURITY DEFINER), so a job hidden from ME by the read setting counts
        f"""CREATE OR REPLACE FUNCTION {s}.launcher_owned_by_other(ref text, me text) RETURNS boolean
  LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  RETURN EXISTS (SELECT 1 FROM {s}.jobs j WHERE j.job_id = ref AND j.owner <> me)
      OR EXISTS (SELECT 1 FROM {s}.sweeps w WHERE w.sweep_id = ref AND w.owner <> me)
      OR (left(ref, 6) = 'sweep:' AND EXISTS (SELECT 1 FROM {s}.sweeps w
                                              WHERE w.sweep_id = substr(ref, 7) AND w.owner <> me));
END $$""",
        # (parameters named apart from every column: in a SQL function a column wins over a parameter)
        f"""CREATE OR REPLACE FUNCTION {s}.launcher_may_act(ref text) RETURNS boolean LANGUAGE sql STABLE AS $$
  SELECT {s}.launcher_acts_on_all() OR ref IS NULL OR NOT {s}.launcher_owned_by_other(ref, current_user::text) $$""",
        f"REVOKE ALL ON FUNCTION {s}.launcher_owned_by_other(text, text) FROM PUBLIC",
    ]
    for t in OWNED:
        out += _policies(s, t, act_own)
    for t in BY_JOB:
        out += _policies(s, t, act_job)
    out.append(_grants(schema))
    return out


def _policies(s: str, table: str, act: str) -> list[str]:
    """TABLE's policies. Each function call of a policy that does not depend on the row is a scalar
    sub-select (``(SELECT f())``): an InitPlan run once per statement, not once per row (SQL functions
    with sub-selects are not inlined). Reading: the team's setting first, so with ``read = team`` a
    listing of 10,000 jobs evaluates no per-row rule (one policy per command: their order is ours)."""
    out = [f"ALTER TABLE {s}.{table} ENABLE ROW LEVEL SECURITY"]
    out += [f"DROP POLICY IF EXISTS {p} ON {s}.{table}" for p in
            ("launcher_act", "launcher_read", "launcher_insert", "launcher_update", "launcher_delete")]
    return out + [
        f"CREATE POLICY launcher_read ON {s}.{table} FOR SELECT USING ((SELECT {s}.launcher_reads_all()) OR {act})",
        f"CREATE POLICY launcher_insert ON {s}.{table} FOR INSERT WITH CHECK ({act})",
        f"CREATE POLICY launcher_update ON {s}.{table} FOR UPDATE USING ({act}) WITH CHECK ({act})",
        f"CREATE POLICY launcher_delete ON {s}.{table} FOR DELETE USING ({act})"]


def _grants(schema: str) -> str:
    """One DO block: the group roles made when this role may make roles, and the privileges
    granted to launcher_team when it exists (the policies decide which rows)."""
    s = ident(schema)
    dml = ", ".join(f"{s}.{t}" for t in (*OWNED, *BY_JOB, *SHARED))
    meta = ", ".join(f"{s}.{t}" for t in META)
    watchers_only = ", ".join(f"{s}.{t}" for t in WATCHERS_ONLY)
    nodes = ", ".join(f"{s}.{t}" for t in NODES)
    return f"""DO $$
DECLARE me pg_catalog.pg_roles%ROWTYPE;
BEGIN
  SELECT * INTO me FROM pg_catalog.pg_roles WHERE rolname = current_user;
  IF me.rolsuper OR me.rolcreaterole THEN
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = '{TEAM_ROLE}') THEN
      CREATE ROLE {TEAM_ROLE} NOLOGIN;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = '{WATCHER_ROLE}') THEN
      CREATE ROLE {WATCHER_ROLE} NOLOGIN IN ROLE {TEAM_ROLE};
    END IF;
  END IF;
  IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = '{TEAM_ROLE}') THEN
    GRANT USAGE ON SCHEMA {s} TO {TEAM_ROLE};
    GRANT SELECT, INSERT, UPDATE, DELETE ON {dml} TO {TEAM_ROLE};
    GRANT SELECT ON {meta} TO {TEAM_ROLE};
    GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA {s} TO {TEAM_ROLE};
    GRANT EXECUTE ON FUNCTION {s}.launcher_owned_by_other(text, text) TO {TEAM_ROLE};
    GRANT SELECT, INSERT, UPDATE ON {nodes} TO {TEAM_ROLE};
  END IF;
  IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = '{WATCHER_ROLE}') THEN
    GRANT SELECT, INSERT, UPDATE, DELETE ON {watchers_only} TO {WATCHER_ROLE};
    GRANT DELETE ON {nodes} TO {WATCHER_ROLE};
  END IF;
END $$"""


# who this connection is: its role, and whether it acts on every job (a watcher, the tables'
# owner, a superuser or a BYPASSRLS role); read once per connection (launcher.state.pg)
WHO = """SELECT current_user::text, launcher_acts_on_all() OR r.rolsuper OR r.rolbypassrls
                OR pg_has_role(c.relowner, 'MEMBER')
         FROM pg_roles r, pg_class c WHERE r.rolname = current_user AND c.oid = to_regclass('jobs')"""


def not_yours(job_id: str, owner: str, verb: str = "change") -> str:
    """One line: JOB_ID belongs to OWNER, and this role may not VERB it."""
    return (f"job {job_id} belongs to {owner}: only {owner} (or a member of {WATCHER_ROLE}) may {verb} it "
            f"on this team's store; nothing was done")
