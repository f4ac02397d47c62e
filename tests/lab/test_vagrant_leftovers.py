"""A Vagrant lab run killed before its teardown does not break the next one.

Found by CI: a run cut off inside the Vagrant test left libvirt's pool state file under
/run/libvirt/storage; the next run's libvirtd restored the pool from it, and ``pool-create-as``
failed with "pool 'gpuforge-vagrant' already exists". Here the same happens for real (libvirtd
SIGKILLed with the pool active, then started again) in a namespace of this test's own.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from gpuforge.lab.system import remove_tree, run, stop_processes
from gpuforge.lab.vagrant_ci import POOL, _ours, _start_libvirt, _virsh, clear_libvirt_objects

NETNS = "gf-vagrant-t"


@pytest.mark.lab
@pytest.mark.lab_vm  # the pool the VM test uses: in its run, never beside it
def test_a_pool_restored_from_a_killed_run_is_cleared_before_the_next_is_made(tmp_path: Path) -> None:
    pool_dir = tmp_path / "pool"
    pool_dir.mkdir()
    run(["ip", "netns", "add", NETNS])
    try:
        run(["ip", "-n", NETNS, "link", "set", "lo", "up"])
        _start_libvirt(NETNS, str(tmp_path))
        # This machine's earlier runs may have left a pool state file too (CI found one): the test starts
        # from what the product starts from, libvirt cleared right after libvirtd starts.
        clear_libvirt_objects(NETNS)
        _virsh(NETNS, "pool-create-as", POOL, "dir", "--target", str(pool_dir))
        # The earlier run is killed: no teardown, libvirtd and virtlogd gone at once.
        stop_processes(_ours(("libvirtd", "virtlogd"), NETNS), timeout=0, sig=signal.SIGKILL)
        assert _ours(("libvirtd", "virtlogd"), NETNS) == []

        _start_libvirt(NETNS, str(tmp_path))
        restored = _virsh(NETNS, "pool-info", POOL, check=False)
        assert restored.returncode == 0, "libvirtd did not restore the pool: this test no longer reproduces the fault"

        assert f"pool {POOL}" in clear_libvirt_objects(NETNS)
        assert _virsh(NETNS, "pool-info", POOL, check=False).returncode != 0
        _virsh(NETNS, "pool-create-as", POOL, "dir", "--target", str(pool_dir))  # the next run makes its own
        assert clear_libvirt_objects(NETNS) == [f"pool {POOL}"]  # and on the way out it goes again
    finally:
        if _ours(("libvirtd",), NETNS):
            _virsh(NETNS, "pool-destroy", POOL, check=False)
        stop_processes(_ours(("libvirtd", "virtlogd", "dnsmasq"), NETNS), timeout=20)
        run(["ip", "netns", "del", NETNS], check=False)
        remove_tree(str(pool_dir))
