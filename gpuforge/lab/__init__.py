"""The gpuforge lab: real Debian 12 nodes (systemd-nspawn containers) on one machine.

``up``/``down``/``status``/``ssh`` are the Python API; ``gpuforge lab`` (see :mod:`.cli`) the CLI.
Naming and addressing are fixed and documented in :mod:`.plan`.
"""

from .core import down, ssh, ssh_command, ssh_options, status, up
from .lab_record import LabState, NodeState
from .system import LabError

__all__ = ["LabError", "LabState", "NodeState", "down", "ssh", "ssh_command", "ssh_options", "status", "up"]
