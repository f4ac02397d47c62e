"""A node's package state broken on purpose, for real: the next apply repairs it, says so, converges.

On a worker of the lab cluster: a package the spec wants is removed, a dpkg run is killed
while a package's postinst is running (dpkg's journal holds the half-done state, and apt
then refuses to install: "dpkg was interrupted"), and one of apt's package lists is made
unparsable. ``plan`` names the repair, ``apply`` repairs (dpkg --configure -a; the lists are
fetched anew through the site mirror), reinstalls and converges, and a second apply changes
nothing.
"""

from __future__ import annotations

from typing import Any

import pytest

from gpuforge.deploy.apt import DPKG_INTERRUPTED

pytestmark = pytest.mark.lab

NODE = "node2"
REMOVED = "prometheus-node-exporter"
BLOCK = "/run/gpuforge-test-postinst-block"
SLOW_DEB = r"""
set -e
d=$(mktemp -d); mkdir -p "$d/DEBIAN"
printf 'Package: gpuforge-slow\nVersion: 1\nArchitecture: all\nMaintainer: t <t@example.org>\nDescription: t\n' \
  > "$d/DEBIAN/control"
printf '#!/bin/sh\nwhile [ -e %s ]; do sleep 1; done\n' BLOCK > "$d/DEBIAN/postinst"
chmod 0755 "$d/DEBIAN/postinst"
dpkg-deb --build "$d" /root/gpuforge-slow.deb >/dev/null
""".replace("BLOCK", BLOCK)
KILL_DPKG_IN_POSTINST = f"""
touch {BLOCK}
setsid dpkg -i /root/gpuforge-slow.deb </dev/null >/dev/null 2>&1 &
for i in $(seq 1 300); do pgrep -f '[g]puforge-slow.postinst' >/dev/null && break; sleep 0.1; done
pgrep -f '[g]puforge-slow.postinst' >/dev/null || {{ echo 'postinst never started' >&2; exit 1; }}
pkill -KILL -x dpkg; pkill -KILL -f '[g]puforge-slow.postinst'; rm -f {BLOCK}
"""
# apt's Packages lists for the Debian archive (not the by-hash copies): one made unparsable.
CORRUPT_LIST = (
    'f=$(ls /var/lib/apt/lists/*_main_binary-amd64_Packages | head -1) && test -n "$f" && '
    'printf \'Package: x\\nVersion: 1\\n\\0\\0\\0garbage without a field name\\n\' > "$f" && echo "$f"'
)


def test_interrupted_dpkg_and_unparsable_lists_are_repaired_by_the_next_apply(lab_cluster: Any) -> None:
    c = lab_cluster
    c.ssh(NODE, f"DEBIAN_FRONTEND=noninteractive apt-get -q -y remove {REMOVED} >/dev/null")
    c.ssh(NODE, SLOW_DEB)
    try:
        c.ssh(NODE, KILL_DPKG_IN_POSTINST)
        # The state the issue saw: dpkg's journal is not empty, apt refuses to install anything.
        assert c.ssh(NODE, f"if {DPKG_INTERRUPTED}; then echo interrupted; fi").strip() == "interrupted"
        refused = c.lab.ssh(NODE, "apt-get -q -y install hello")
        assert refused.returncode != 0 and "dpkg --configure -a" in refused.stderr, refused
        corrupted = c.ssh(NODE, CORRUPT_LIST).strip()
        assert corrupted.endswith("_Packages")

        plan = c.plan()
        kinds = [s["kind"] for op in plan["hosts"][NODE]["operations"] for s in op["steps"]]
        assert "repair" in kinds and "install" in kinds, plan["hosts"][NODE]

        result = c.apply()
        assert result["returncode"] == 0 and result["ok"], result
        changed = result["hosts"][NODE]["changed"]
        assert "packages: repair an interrupted package run" in changed, changed  # reported as its own change
        assert "packages: every layer's distro packages in one transaction" in changed, changed
        assert c.ssh(NODE, f"if {DPKG_INTERRUPTED}; then echo interrupted; fi").strip() == ""
        assert c.ssh(NODE, "dpkg-query -W -f='${db:Status-Abbrev}' gpuforge-slow").strip() == "ii"
        assert c.ssh(NODE, f"dpkg-query -W -f='${{db:Status-Abbrev}}' {REMOVED}").strip() == "ii"
        assert c.ssh(NODE, "apt-cache policy >/dev/null && echo parsable").strip() == "parsable"
        assert c.ssh(NODE, f"systemctl is-active {REMOVED}").strip() == "active"

        again = c.apply()
        assert again["returncode"] == 0 and not any(h["changed"] for h in again["hosts"].values()), again
    finally:
        c.ssh(
            NODE,
            f"rm -f {BLOCK}; dpkg --configure -a; dpkg -P gpuforge-slow hello; rm -f /root/gpuforge-slow.deb",
            check=False,
        )


SEEN = "/run/gpuforge-test-wait-seen"
#: Ends the held dpkg once the apply's repair is seen waiting for it (at most 120 s), and notes it.
END_WHEN_WAITED_FOR = (
    "setsid sh -c 'for i in $(seq 1 600); do "
    f'pgrep -f "[g]f_package_run" >/dev/null && {{ touch {SEEN}; sleep 2; break; }}; sleep 0.2; done; '
    f"rm -f {BLOCK}' </dev/null >/dev/null 2>&1 &"
)


def test_a_package_run_left_going_on_a_node_is_waited_for_then_repaired(lab_cluster: Any) -> None:
    """Issue 30's Ctrl-C case: an interrupted apply's package run goes on on the node after the
    control host stopped (here a dpkg held in a postinst; its state is half-configured, so the
    repair is due). The next apply waits for it instead of failing on dpkg's lock, then repairs
    (nothing left to repair once it ended) and converges."""
    c = lab_cluster
    c.ssh(NODE, f"DEBIAN_FRONTEND=noninteractive apt-get -q -y remove {REMOVED} >/dev/null; rm -f {SEEN}")
    c.ssh(NODE, SLOW_DEB)
    try:
        c.ssh(NODE, f"touch {BLOCK}; setsid dpkg -i /root/gpuforge-slow.deb </dev/null >/dev/null 2>&1 &")
        started = "pgrep -f '[g]puforge-slow.postinst' >/dev/null"
        c.ssh(NODE, f"for i in $(seq 1 300); do {started} && exit 0; sleep 0.1; done; exit 1")
        refused = c.lab.ssh(NODE, "dpkg --configure -a")  # what the repair ran before: it fails on the lock
        assert refused.returncode != 0 and "lock" in refused.stderr, refused
        c.ssh(NODE, END_WHEN_WAITED_FOR)
        result = c.apply()
        assert result["returncode"] == 0 and result["ok"], result
        assert c.ssh(NODE, f"test -e {SEEN} && echo waited").strip() == "waited"  # the apply did wait
        assert c.ssh(NODE, f"dpkg-query -W -f='${{db:Status-Abbrev}}' {REMOVED}").strip() == "ii"
        assert c.ssh(NODE, "dpkg-query -W -f='${db:Status-Abbrev}' gpuforge-slow").strip() == "ii"
    finally:
        cleanup = f"rm -f {BLOCK} {SEEN}; sleep 2; dpkg --configure -a; dpkg -P gpuforge-slow"
        c.ssh(NODE, f"{cleanup}; rm -f /root/gpuforge-slow.deb", check=False)
