#!/usr/bin/env bash
# Install everything gpuforge and its tests need on a fresh Debian 12 machine (run as root).
# Debian packages for the lab (systemd-nspawn, mmdebstrap, apt-cacher-ng, ssh, vagrant and its libvirt
# provider, which `vagrant validate` needs, with libvirt, qemu, dnsmasq and socat: the Vagrant test boots a VM
# under software emulation inside a network namespace; gnupg: `gpuforge bundle` checks and makes repository signatures;
# rpm: it checks rpm packages' signatures; createrepo-c and dnf: the RHEL bundle tests build real rpm-md
# repositories and read the bundle with dnf; chromium: the acceptance tests open the campaign's HTML report in
# Debian's headless Chromium, tests/acceptance/test_report_browser.py),
# then a virtualenv in .venv with gpuforge and its development tools.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" -ne 0 ]; then
  echo "setup: run as root (the lab needs network namespaces and systemd-nspawn)" >&2
  exit 2
fi

# A package run cut off earlier (Ctrl-C during an install, a killed dpkg) leaves dpkg "interrupted",
# and every apt command then fails at once ("dpkg was interrupted, you must manually run 'dpkg
# --configure -a'"). Finish it first, and say so.
# shellcheck source=scripts/repair_dpkg.sh
. "$(dirname "$0")/repair_dpkg.sh"
repair_interrupted_dpkg

APT_PACKAGES=(
  python3 python3-venv python3-pip
  systemd-container mmdebstrap apt-cacher-ng iproute2 openssh-client
  ca-certificates gnupg vagrant vagrant-libvirt stress-ng
  libvirt-daemon-system qemu-system-x86 qemu-utils dnsmasq-base iptables socat e2fsprogs
  prometheus prometheus-alertmanager
  rpm createrepo-c dnf
  chromium
  etcd-server etcd-client
)
# The virtualenv: gpuforge and its development tools from PyPI.
setup_venv() {
  [ -x .venv/bin/python ] || python3 -m venv .venv
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -e '.[dev,ansible,testinfra]'
}
# Where Python can already make a virtualenv, it is made while apt installs the Debian packages
# (two downloads at once instead of one after the other); otherwise after them (python3-venv).
venv_log=$(mktemp)
venv_pid=
trap '[ -n "$venv_pid" ] && kill "$venv_pid" 2>/dev/null; rm -f "$venv_log"' EXIT
if python3 -c 'import ensurepip, venv' 2>/dev/null; then
  setup_venv >"$venv_log" 2>&1 &
  venv_pid=$!
fi

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# Whether this script installed libvirt (a marker, so a run cut off after the install still knows).
LIBVIRT_MARK=/var/lib/gpuforge/setup-installed-libvirt
case " ${missing[*]} " in *" libvirt-daemon-system "*) mkdir -p /var/lib/gpuforge && touch "$LIBVIRT_MARK" ;; esac
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  # apt-cacher-ng asks whether to allow HTTPS tunnels; the lab starts its own instance anyway.
  echo "apt-cacher-ng apt-cacher-ng/tunnelenable boolean false" | debconf-set-selections
  apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
# The distro's apt-cacher-ng and Prometheus services are not used: each lab runs its own.
if command -v systemctl >/dev/null && [ -d /run/systemd/system ]; then
  systemctl disable --now apt-cacher-ng >/dev/null 2>&1 || true
  # promtool/amtool are what the tests need; the lab's Prometheus runs inside its nodes.
  systemctl disable --now prometheus prometheus-alertmanager prometheus-node-exporter >/dev/null 2>&1 || true
  # etcd and etcdctl are what the etcd snapshot test needs; it starts its own etcd on its own port.
  systemctl disable --now etcd >/dev/null 2>&1 || true
  # The Vagrant test runs its own libvirtd inside a network namespace and will not start beside
  # the machine's. A libvirt this run installed (Debian starts it) is stopped and disabled; one the
  # machine had before is a workstation's and is left alone (the test then says how to stop it).
  if [ -e "$LIBVIRT_MARK" ]; then
    echo "setup: disabling the libvirtd that came with libvirt-daemon-system (the Vagrant test runs its own)"
    systemctl disable --now libvirtd.service libvirtd.socket libvirtd-ro.socket libvirtd-admin.socket \
      virtlogd.service virtlogd.socket virtlogd-admin.socket >/dev/null 2>&1 || true
  fi
fi

if [ -n "$venv_pid" ]; then
  venv_rc=0
  wait "$venv_pid" || venv_rc=$?
  venv_pid=
  cat "$venv_log"
  [ "$venv_rc" -eq 0 ] || { echo "setup: the virtualenv could not be made (pip exited $venv_rc)" >&2; exit 1; }
else
  setup_venv
fi
echo "setup: done (.venv/bin/gpuforge)"
