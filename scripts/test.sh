#!/usr/bin/env bash
# Set everything up and run the whole test suite: lint, types, unit tests and the lab
# tests on real nodes (root; CI runs them all). Extra arguments go to pytest.
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh || exit 1
export PATH="$PWD/.venv/bin:$PATH"

echo "== ruff"; ruff check . || exit 1
echo "== mypy"; mypy || exit 1
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
pytest "$@"
rc=$?
echo "test: pytest took $(( $(date +%s) - start )) s"
if [ $rc -eq 5 ]; then
  echo "test: pytest collected no tests: that is a broken suite, not a pass" >&2
  exit 1
fi
exit $rc
