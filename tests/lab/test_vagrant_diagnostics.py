"""A failed ``vagrant`` call in the VM lab says what libvirt saw (domains, addresses, DHCP leases).

Real processes: ``ip``, ``vagrant`` and ``virsh`` are stub programs on PATH (``ip netns exec NS CMD``
runs CMD), so the commands VagrantLab really builds are executed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuforge.lab.system import LabError
from gpuforge.lab.vagrant_box import Box
from gpuforge.lab.vagrant_ci import VagrantLab

STUBS = {
    "ip": '#!/bin/sh\n[ "$1 $2" = "netns exec" ] || exit 9\nshift 3\nexec "$@"\n',
    "vagrant": "#!/bin/sh\necho 'The specified wait_for timeout (2 seconds) was exceeded' >&2\nexit 1\n",
    "virsh": """#!/bin/sh
shift 2  # -c qemu:///system
case "$1" in
  list) printf 'vagrant_node1\\nvagrant_node2\\n' ;;
  domstate) echo running ;;
  domifaddr) [ "$2" = vagrant_node1 ] && echo ' vnet0  52:54:00:aa:bb:01  ipv4  192.0.2.31/24' ;;
  net-list) printf 'vagrant-libvirt\\n' ;;
  net-dhcp-leases) echo ' 2026-11-28 12:00:00  52:54:00:aa:bb:01  ipv4  192.0.2.31/24  node1' ;;
esac
""",
}


def test_a_failed_vagrant_up_names_what_libvirt_saw(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in STUBS.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    lab = VagrantLab(str(tmp_path), Box(str(tmp_path / "box"), "gpuforge/test"), nodes=2)
    with pytest.raises(LabError) as failed:
        lab.vagrant("up", "--provider=libvirt", "--no-parallel")
    text = str(failed.value)
    assert f"vagrant up --provider=libvirt --no-parallel failed; see {tmp_path}/vagrant.log" in text
    assert "libvirt domain vagrant_node1: running\nvnet0  52:54:00:aa:bb:01  ipv4  192.0.2.31/24" in text
    assert "libvirt domain vagrant_node2: running\n" in text
    assert "libvirt network vagrant-libvirt DHCP leases:\n2026-11-28 12:00:00  52:54:00:aa:bb:01" in text
    assert "wait_for timeout" in (tmp_path / "vagrant.log").read_text()
