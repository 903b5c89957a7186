# The tiers of scripts/test (sourced by it; uses its log/die and $VENV): independent pytest
# sessions run side by side. Each starts the services its tests need (its own netns cluster,
# docker clusters, sshd, moto: all pick free names, nets and ports, so sessions coexist) and
# writes its own log. Tiers are directories and markers, never file lists: the three
# integration tiers split tests/integration completely by marker (docker_slurm / slurm /
# the rest), so a new test file lands in a tier by itself.

TIER_NAMES="unit slurm docker services faults e2e"

tier_args() { # NAME: the pytest arguments of tier NAME, into TIER_ARGS
  local not_e2e='not skypilot_e2e'
  case $1 in
    # (not niced: at nice 10 on a machine at load 20 the unit tier starved, its CLI calls
    # past their 60 s timeouts; on an idle machine the tiers leave each other room anyway)
    # (the state store's tests on PostgreSQL, marked postgres wherever they live, run in the
    # services tier only: it alone starts the PostgreSQL server, tests/fixtures/postgres.py)
    unit) TIER_ARGS=(tests --ignore=tests/integration -m "not postgres") ;;
    slurm) TIER_ARGS=(tests/integration -m "slurm and not docker_slurm and $not_e2e") ;;
    docker) TIER_ARGS=(tests/integration -m "docker_slurm and $not_e2e") ;;
    # `integration`: every test under tests/integration (tests/conftest.py marks them)
    # (the long fault-injection loops off the clusters, marker faults, are their own tier beside
    # it: ~17 of the services tier's 38 minutes were three such tests waiting on processes)
    services) TIER_ARGS=(tests -m "(integration or postgres) and not slurm and not faults and $not_e2e") ;;
    faults) TIER_ARGS=(tests/integration -m "faults and not slurm and $not_e2e") ;;
    e2e) TIER_ARGS=(tests/integration -m skypilot_e2e) ;;
    *) die "unknown tier '$1' in LAUNCHER_TEST_TIERS (known: $TIER_NAMES, or all)" ;;
  esac
}

tier_result() { # LOG: pytest's last summary line ("== 62 passed in 812.34s ==") without the ==
  grep -E '(passed|failed|errors?|deselected|skipped|no tests ran).* in [0-9.]+s' "$1" 2>/dev/null | tail -n 1 | sed -E 's/^=+ //; s/ =+$//'
}

tier_cpu() { # LOG: "user 3m2.1s sys 0m20.5s[; all 1234 s]", the CPU time of the tier's pytest and
  # its children, and of every process the tier started where its cgroup measured it
  local all
  all=$(sed -n 's/^\[scripts\/test\] cpu of all its processes: //p' "$1" 2>/dev/null | tail -n 1)
  echo "$(sed -n 's/^\[scripts\/test\] cpu: //p' "$1" 2>/dev/null | tail -n 1)${all:+; all $all}"
}

tier_failures() { # LOG: what to show of a failed tier: its failures and summary, else its tail
  if grep -qE '^=+ (FAILURES|ERRORS) =+$' "$1"; then
    sed -n -E '/^=+ (FAILURES|ERRORS) =+$/,$p' "$1"
  else
    tail -n 80 "$1"
  fi
}

declare -A TIER_PID TIER_T0 TIER_RC TIER_SECS

# The CPU of everything a tier started, detached jobs and daemons included (a local job is
# setsid'd and reparented to init, so the shell's `times` never sees it): the tier's shell joins
# a cgroup of its own (cgroup v1 cpuacct, or v2), which every process it forks inherits.
# Best effort: where no cgroup can be made (not root, no such controller) there is no figure.
tier_cgroup() { # TIER: the tier's cgroup folder, made now; empty when none can be
  local base
  for base in /sys/fs/cgroup/cpuacct /sys/fs/cgroup; do
    if [[ -e $base/cpuacct.usage || -e $base/cgroup.subtree_control ]] && [[ -w $base ]]; then
      local dir=$base/launcher-tests-$$-$1
      mkdir -p "$dir" 2>/dev/null && echo "$dir" && return 0
    fi
  done
  return 0
}

tier_cgroup_cpu() { # DIR: CPU seconds used in the cgroup so far ("" when unknown)
  if [[ -r $1/cpuacct.usage ]]; then
    awk '{printf "%.0f", $1 / 1e9}' "$1/cpuacct.usage"
  elif [[ -r $1/cpu.stat ]]; then
    awk '$1 == "usage_usec" {printf "%.0f", $2 / 1e6}' "$1/cpu.stat"
  fi
}

tier_cgroup_leave() { # DIR: move this shell out and remove DIR once empty (a process ending as the
  # tier ends gets 10 s); say which processes stayed in it, and leave it to them
  local left i
  echo "$BASHPID" 2>/dev/null >"$(dirname "$1")/cgroup.procs" || true
  for ((i = 0; i < 20; i++)); do
    left=$(tr '\n' ' ' <"$1/cgroup.procs" 2>/dev/null || true)
    [[ -n ${left// /} ]] || break
    sleep 0.5
  done
  if [[ -n ${left// /} ]]; then
    echo "[scripts/test] processes the tier left running (cgroup $1):"
    # shellcheck disable=SC2086 # one pid per word
    ps -o pid=,etimes=,args= -p "$(echo $left | tr ' ' ',')" 2>/dev/null | cut -c1-200 |
      sed 's/^/[scripts\/test]   /' || true
  else
    rmdir "$1" 2>/dev/null || true
  fi
}

stop_tiers() { # SIGNAL: end every tier still running, let their fixtures tear down, then exit
  local t
  # Ctrl-C reached every tier's pytest already (one process group); a TERM only reached this
  # script: pass it on to each tier's pytest (the children of the tier's subshell), by PID
  if [[ $1 == TERM ]]; then
    for t in "${!TIER_PID[@]}"; do
      [[ -n ${TIER_RC[$t]:-} ]] || pkill -TERM -P "${TIER_PID[$t]}" 2>/dev/null || true
    done
  fi
  wait
  log "interrupted ($1); tier logs in $TIER_LOGS"
  exit 130
}

run_tiers() { # TIER...: run them side by side, report each as it ends, then a summary
  local t p rc=0 failed=() t0
  for t in "$@"; do tier_args "$t"; done # an unknown name fails before anything starts
  TIER_LOGS=${LAUNCHER_TEST_LOGS:-$(mktemp -d /tmp/launcher-test-logs.XXXX)}
  mkdir -p "$TIER_LOGS"
  t0=$(date +%s)
  log "running the tiers $* side by side (CI=${CI:-}); logs: $TIER_LOGS/<tier>.log"
  trap 'stop_tiers INT' INT
  trap 'stop_tiers TERM' TERM
  declare -A tier_of
  for t in "$@"; do
    tier_args "$t"
    echo "[scripts/test] pytest ${TIER_ARGS[*]} --durations=25" >"$TIER_LOGS/$t.log"
    (
      trc=0
      cg=$(tier_cgroup "$t")
      [[ -z $cg ]] || echo "$BASHPID" 2>/dev/null >"$cg/cgroup.procs" || cg=""
      "$VENV/bin/python" -m pytest "${TIER_ARGS[@]}" --durations=25 || trc=$?
      times >"$TIER_LOGS/$t.times" # this shell's, then its children's CPU time: pytest's and theirs
      echo "[scripts/test] cpu: $(sed -n '2s/\([^ ]*\) \(.*\)/user \1 sys \2/p' "$TIER_LOGS/$t.times")"
      if [[ -n $cg ]]; then
        echo "[scripts/test] cpu of all its processes: $(tier_cgroup_cpu "$cg") s"
        tier_cgroup_leave "$cg"
      fi
      exit "$trc"
    ) >>"$TIER_LOGS/$t.log" 2>&1 &
    TIER_PID[$t]=$!
    TIER_T0[$t]=$(date +%s)
    tier_of[$!]=$t
  done
  while ((${#tier_of[@]})); do
    sleep 1 & # (a blocking `wait -n` would hold off the TERM trap until a tier ends)
    wait $! || true
    for p in "${!tier_of[@]}"; do
      kill -0 "$p" 2>/dev/null && continue
      wait "$p" && rc=0 || rc=$?
      t=${tier_of[$p]}
      unset "tier_of[$p]"
      TIER_RC[$t]=$rc
      TIER_SECS[$t]=$(($(date +%s) - ${TIER_T0[$t]}))
      log "tier $t: $( ((rc == 0)) && echo passed || echo "FAILED (exit $rc)") in ${TIER_SECS[$t]} s: $(tier_result "$TIER_LOGS/$t.log")"
    done
  done
  trap - INT TERM
  for t in "$@"; do
    [[ ${TIER_RC[$t]} == 0 ]] && continue
    failed+=("$t")
    echo "======================== tier $t failed (exit ${TIER_RC[$t]}): $TIER_LOGS/$t.log" >&2
    tier_failures "$TIER_LOGS/$t.log" >&2
  done
  log "summary ($(($(date +%s) - t0)) s in all, tiers side by side; logs in $TIER_LOGS):"
  for t in "$@"; do
    printf '[scripts/test]   %-9s %-7s %5s s  (cpu: %s)  %s\n' "$t" \
      "$([[ ${TIER_RC[$t]} == 0 ]] && echo passed || echo FAILED)" "${TIER_SECS[$t]}" \
      "$(tier_cpu "$TIER_LOGS/$t.log")" "$(tier_result "$TIER_LOGS/$t.log")" >&2
  done
  ((${#failed[@]} == 0)) || die "tier(s) failed: ${failed[*]}"
}
