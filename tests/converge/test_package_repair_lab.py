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
