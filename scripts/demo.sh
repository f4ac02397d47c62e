#!/usr/bin/env bash
# The main job on the built-in lab: set up, bring up 3 Debian nodes, apply the default
# spec (munge, MariaDB, slurmdbd, slurmctld, slurmd, QOS/accounts), validate every node,
# print the report. The lab stays up to explore: `.venv/bin/gpuforge lab down` removes it.
set -euo pipefail
cd "$(dirname "$0")/.."
# Root is needed (network namespaces, systemd-nspawn, packages). As a user with sudo, the script
# runs itself again under sudo; a root shell (a fresh machine has no sudo) runs it as it is.
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then exec sudo --preserve-env=CI,GPUFORGE_CPU_HOG,COLUMNS bash "$PWD/scripts/demo.sh" "$@"; fi
  echo "demo: run as root (there is no sudo here to become root with)" >&2
  exit 2
fi
bash scripts/setup.sh
export PATH="$PWD/.venv/bin:$PATH"
export COLUMNS="${COLUMNS:-140}"  # wide enough for the report table when not on a terminal
SPEC=inventories/lab.yaml

gpuforge check "$SPEC"
gpuforge lab up --nodes 3
gpuforge apply --yes "$SPEC"
set +e
gpuforge validate "$SPEC" --junit lab-report.xml
rc=$?
set -e
echo
echo "JUnit report: lab-report.xml. Explore: gpuforge lab ssh node1 -- sinfo. Remove the lab: gpuforge lab down"
exit $rc
