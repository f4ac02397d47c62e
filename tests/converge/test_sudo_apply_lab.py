"""Apply as a non-root SSH user with sudo, for real: secrets are re-written on the nodes and no
uploaded file ever appears in /tmp (pyinfra's default temp dir, where local users could read a
munge key until sudo copies it). Uploads pass through the user's 0700 directory instead.

A watcher on the node lists /tmp and the upload directory every 20 ms during the apply; the
old behaviour (an upload of a few hundred ms through /tmp/pyinfra-<sha1>) is caught by it.
"""

from __future__ import annotations

from typing import Any

import pytest

from gpuforge.deploy.converge import UPLOAD_DIR

pytestmark = pytest.mark.lab

USER = "gfadmin"
NODE = "node2"
WATCH_LOG = "/root/gpuforge-tmp-watch.log"
ADD_SUDO_USER = f"""
id {USER} >/dev/null 2>&1 || useradd -m -s /bin/sh {USER}
install -d -m 0700 -o {USER} -g {USER} /home/{USER}/.ssh
install -m 0600 -o {USER} -g {USER} /root/.ssh/authorized_keys /home/{USER}/.ssh/authorized_keys
echo '{USER} ALL=(ALL) NOPASSWD: ALL' > /etc/sudoers.d/{USER}; chmod 0440 /etc/sudoers.d/{USER}
"""
WATCH = (
    f"nohup sh -c 'while :; do ls -l --time-style=+ /tmp {UPLOAD_DIR} 2>/dev/null; sleep 0.02; done' "
    f"> {WATCH_LOG} 2>&1 & echo $!"
)


def test_apply_as_a_sudo_user_never_puts_a_file_in_tmp(lab_cluster: Any) -> None:
    c = lab_cluster
    for node in ("node1", "node2", "node3"):
        c.ssh(node, ADD_SUDO_USER)
    spec = c.write("sudo-user.yaml", mutate=lambda d: d["ssh"].update(user=USER, sudo=True))
    # Make apply write secrets again: the munge key on node2.
    c.ssh(NODE, "rm -f /etc/munge/munge.key")
    watcher = c.ssh(NODE, WATCH).strip()
    try:
        result = c.apply(spec)
    finally:
        c.ssh(NODE, f"kill {watcher} 2>/dev/null || true")
    if not (result["returncode"] == 0 and result["ok"]):  # say why (a load flake seen once: sshd hung up)
        errors = {n: h.get("error") for n, h in result["hosts"].items() if h.get("error")}
        sshd = c.ssh(NODE, "journalctl -u ssh -n 30 --no-pager 2>&1 | cut -c1-200; uptime", check=False)
        pytest.fail(f"apply as {USER} failed: {errors}\n{NODE}'s sshd:\n{sshd}")
    assert any("munge" in ch for ch in result["hosts"][NODE]["changed"]), result["hosts"][NODE]

    listing = c.ssh(NODE, f"cat {WATCH_LOG}")
    assert listing.count("total") > 10, "the watcher did not run during the apply"
    assert "pyinfra-" not in listing, [ln for ln in listing.splitlines() if "pyinfra-" in ln][:5]
    # The key is back, root-only for munge; the upload directory is the user's alone and empty.
    assert c.ssh(NODE, "stat -c '%a %U' /etc/munge/munge.key").strip() == "400 munge"
    assert c.ssh(NODE, f"stat -c '%a %U' {UPLOAD_DIR}").strip() == f"700 {USER}"
    assert c.ssh(NODE, f"ls -A {UPLOAD_DIR}").strip() == ""
    assert c.ssh(NODE, "munge -n | unmunge >/dev/null && echo ok").strip() == "ok"
    # Nothing else changes when applied again as that user.
    again = c.apply(spec)
    assert again["returncode"] == 0 and again["ok"] and all(not h["changed"] for h in again["hosts"].values()), again
