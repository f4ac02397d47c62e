#!/usr/bin/env bash
# repair_interrupted_dpkg: finish an interrupted dpkg run (dpkg --configure -a) before apt is used.
# Sourced by setup.sh. DPKG_ADMINDIR (default /var/lib/dpkg) is where dpkg keeps its state: a file
# in its updates/ folder, or a package dpkg --audit lists as half-installed or half-configured,
# means a run was cut off.
repair_interrupted_dpkg() {
  local admindir="${DPKG_ADMINDIR:-/var/lib/dpkg}"
  local pending=""
  if [ -d "$admindir/updates" ] && [ -n "$(ls -A "$admindir/updates" 2>/dev/null)" ]; then
    pending="unfinished updates in $admindir/updates"
  elif [ -n "$(dpkg --audit 2>/dev/null)" ]; then
    pending="packages dpkg --audit lists as not fully installed"
  fi
  [ -z "$pending" ] && return 0
  echo "setup: an earlier package run was interrupted ($pending): finishing it with dpkg --configure -a"
  DEBIAN_FRONTEND=noninteractive dpkg --configure -a
}
