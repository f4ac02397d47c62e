#!/usr/bin/env bash
# The main job on the built-in lab: set up, bring up 3 Debian nodes, apply the default
# spec (munge, MariaDB, slurmdbd, slurmctld, slurmd, QOS/accounts), validate every node,
# print the report. The lab stays up to explore: `.venv/bin/gpuforge lab down` removes it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$PWD/.venv/bin:$PATH"
export COLUMNS="${COLUMNS:-140}"  # wide enough for the report table when not on a terminal
SPEC=inventories/lab.yaml

gpuforge check "$SPEC"
gpuforge lab up --nodes 3
gpuforge apply "$SPEC"
set +e
gpuforge validate "$SPEC" --junit lab-report.xml
rc=$?
set -e
echo
echo "JUnit report: lab-report.xml. Explore: gpuforge lab ssh node1 -- sinfo. Remove the lab: gpuforge lab down"
exit $rc
