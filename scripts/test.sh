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
pytest "$@"
rc=$?
if [ $rc -eq 5 ]; then
  echo "test: pytest collected no tests: that is a broken suite, not a pass" >&2
  exit 1
fi
exit $rc
