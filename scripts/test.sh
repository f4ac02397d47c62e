#!/usr/bin/env bash
# Set everything up and run the whole test suite: lint, types, unit tests (with coverage) and
# the lab tests on real nodes (root; CI runs them all). Extra arguments go to pytest.
set -uo pipefail
cd "$(dirname "$0")/.."
# Root is needed (network namespaces, systemd-nspawn, packages). As a user with sudo, the script
# runs itself again under sudo; a root shell (a fresh machine has no sudo) runs it as it is.
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then exec sudo --preserve-env=CI,GPUFORGE_CPU_HOG,GPUFORGE_LAB_BUILD,GPUFORGE_TEST_WORKERS,GPUFORGE_LAB_WORKERS,COLUMNS bash "$PWD/scripts/test.sh" "$@"; fi
  echo "test: run as root (there is no sudo here to become root with)" >&2
  exit 2
fi
# Phase start times (epoch seconds) with the machine's CPU time so far (busy and all, in clock ticks
# from /proc/stat), printed and compared with the previous run at the end: a phase's seconds and how
# busy the cores were in it (a phase near 100% is bound by CPU; one far below it waits).
stamp() { echo "$1=$(date +%s):$(awk '/^cpu /{b=$2+$3+$4+$7+$8+$9; print b":"b+$5+$6}' /proc/stat)"; }
marks=("$(stamp setup)")
bash scripts/setup.sh || exit 1
export PATH="$PWD/.venv/bin:$PATH"

marks+=("$(stamp ruff)"); echo "== ruff"; ruff check . || exit 1
marks+=("$(stamp mypy)"); echo "== mypy"; mypy || exit 1
echo "== pytest"
# GPUFORGE_CPU_HOG=1: run the suite with both cores busy (stress-ng beside it, bounded, always stopped),
# as on a shared CI machine.
hog=
if [ -n "${GPUFORGE_CPU_HOG:-}" ]; then
  stress-ng --cpu "$(nproc)" --timeout 5400s --quiet &
  hog=$!
  trap '[ -n "$hog" ] && kill "$hog" 2>/dev/null' EXIT
  echo "test: CPU hog running beside the suite (stress-ng pid $hog)"
fi
start=$(date +%s)
# The tests that need no lab, with line coverage of the deploy side and the orchestration (what
# they must cover: at least 85%, or this run fails), and the lab tests on real nodes. A path given
# on the command line narrows every run (and drops the bound).
cov_min=85
for a in "$@"; do case "$a" in -*) ;; *) cov_min=0 ;; esac; done
# Only a whole run is kept as the record the next run compares with (a part would read as a speed-up).
record=${GPUFORGE_TEST_TIMES:-/var/lib/gpuforge/test-times.json}
[ "$cov_min" -eq 0 ] && record=$(mktemp -u)
lab_junit=$(mktemp); unit_junit=$(mktemp)
trap '[ -n "$hog" ] && kill "$hog" 2>/dev/null; rm -f "$lab_junit" "$unit_junit"' EXIT
# The non-lab tests run on every core (pytest-xdist; a module's tests stay in one worker, so its
# fixtures are made once), one worker more than cores: quiet, 3 workers on 2 cores took 560 s and 2
# took 572 (a worker waiting on a subprocess leaves its core to another); on a busy machine the suite
# keeps a larger share of the cores (docs/testing.md). GPUFORGE_TEST_WORKERS=1 runs them in one process.
workers=${GPUFORGE_TEST_WORKERS:-$(( $(nproc) + 1 ))}
parallel=()
[ "$workers" -gt 1 ] && parallel=(-n "$workers" --dist loadscope)
# A failed test's printed output goes into the JUnit files too: the digest at the end repeats it
# where a reader of the log's tail sees it.
junit_opts=(-o junit_logging=system-out -o junit_log_passing_tests=false)
runs=()
# Not beside the lab: run so, the non-lab tests took 28 min instead of 12 and failed where they read
# the machine's own processes (a lab node's apt-get is one of them, seen by the apt repair's check).
marks+=("$(stamp not-lab)")
echo "== pytest (not lab, $workers worker(s); coverage of gpuforge/deploy and gpuforge/orchestrate, at least ${cov_min}%)"
pytest -m "not lab" "${parallel[@]}" --cov=gpuforge/deploy --cov=gpuforge/orchestrate --cov-report=term \
  --cov-fail-under="$cov_min" --junitxml="$unit_junit" "${junit_opts[@]}" "$@"
rc_unit=$?
marks+=("$(stamp lab)")
# Slurm compiled from SchedMD's tarball (lab_build: ~10 min of both cores) only with GPUFORGE_LAB_BUILD=1:
# CI's budget cannot hold it; its last result is in bench/results/slurm_build.json.
no_build=" and not lab_build"; [ -n "${GPUFORGE_LAB_BUILD:-}" ] && no_build=""
if [ "${GPUFORGE_LAB_WORKERS:-2}" -gt 1 ]; then
  # Lab tests wait on nodes and VMs more than they compute, so three pytest runs go side by side: the
  # tests marked lab_vm (qemu VMs), the tests marked lab_beside (labs of their own, never the session
  # lab: HA, the Slurm upgrade, 24 nodes, the baked image, Kubernetes), both in the background with
  # their output printed when all are done, and every other lab test (the session lab) here.
  t0=$(date +%s)
  beside_names=(lab-vm lab-beside)
  declare -A beside_mark=([lab-vm]="lab and lab_vm" [lab-beside]="lab and lab_beside and not lab_vm$no_build")
  declare -A beside_pid beside_log beside_junit
  for name in "${beside_names[@]}"; do
    beside_log[$name]=$(mktemp); beside_junit[$name]=$(mktemp)
    ( pytest -m "${beside_mark[$name]}" --durations=10 --junitxml="${beside_junit[$name]}" "${junit_opts[@]}" "$@" \
        >"${beside_log[$name]}" 2>&1
      rc=$?; echo "$rc $(( $(date +%s) - t0 ))" >"${beside_log[$name]}.done"; exit $rc ) &
    beside_pid[$name]=$!
  done
  # Ctrl-C or a stop of this script stops the other runs too (SIGTERM: their labs are taken down).
  stop_beside() {
    for pid in "${beside_pid[@]}"; do kill -TERM "$pid" 2>/dev/null; done
    for pid in "${beside_pid[@]}"; do wait "$pid"; done
    [ -n "$hog" ] && kill "$hog" 2>/dev/null
    rm -f "$lab_junit" "$unit_junit" "${beside_log[@]}" "${beside_junit[@]}"
    for f in "${beside_log[@]}"; do rm -f "$f.done"; done
  }
  trap stop_beside EXIT
  trap 'exit 130' INT TERM
  echo "== pytest (lab: every lab test on the session lab; beside it the lab_vm and the lab_beside tests, printed when all are done)"
  pytest -m "lab and not lab_beside and not lab_vm" --durations=15 --junitxml="$lab_junit" "${junit_opts[@]}" "$@"  # the slowest lab tests, to keep the run inside CI's limit
  rc_others=$?
  runs+=("lab=$(( $(date +%s) - t0 ))")
  # The lab's status: the first failure of any run; 5 (no test collected) only when all had none.
  rc_lab=0; [ "$rc_others" -ne 5 ] && rc_lab=$rc_others
  all_empty=$(( rc_others == 5 ))
  lab_junits=("$lab_junit")
  for name in "${beside_names[@]}"; do
    wait "${beside_pid[$name]}"; unset "beside_pid[$name]"  # done: the trap signals it no more
    echo "== pytest ($name: the tests marked ${beside_mark[$name]#lab and })"; cat "${beside_log[$name]}"
    read -r rc seconds <"${beside_log[$name]}.done" || rc=1
    runs+=("$name=${seconds:-0}")
    [ "$rc_lab" -eq 0 ] && [ "$rc" -ne 5 ] && rc_lab=$rc
    [ "$rc" -ne 5 ] && all_empty=0
    lab_junits+=("${beside_junit[$name]}")
  done
  [ "$all_empty" -eq 1 ] && rc_lab=5
else
  echo "== pytest (lab: real nodes, GPUFORGE_LAB_WORKERS=1: one run)"
  pytest -m "lab$no_build" --durations=15 --junitxml="$lab_junit" "${junit_opts[@]}" "$@"
  rc_lab=$?
  lab_junits=("$lab_junit")
fi
marks+=("$(stamp end)")
echo "test: pytest took $(( $(date +%s) - start )) s (not lab: exit $rc_unit, lab: exit $rc_lab)"
python3 scripts/test_times.py --record "$record" --lab-junit "${lab_junits[@]}" --runs "${runs[@]}" -- "${marks[@]}"
python3 scripts/failure_digest.py "$unit_junit" "${lab_junits[@]}"
if [ $rc_unit -eq 5 ] && [ $rc_lab -eq 5 ]; then
  echo "test: pytest collected no tests: that is a broken suite, not a pass" >&2
  exit 1
fi
# A run that selects only lab tests (or none of them) leaves the other run empty: that is fine.
[ $rc_unit -eq 5 ] && rc_unit=0
[ $rc_lab -eq 5 ] && rc_lab=0
[ $rc_unit -ne 0 ] && exit $rc_unit
exit $rc_lab
