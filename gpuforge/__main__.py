"""The ``gpuforge`` command (also ``python -m gpuforge``).

The commands that run pyinfra (``apply``, ``plan``) make gevent's monkey patching the first thing
the process does, before anything imports ``socket``, ``ssl`` or ``threading``, as pyinfra's own
CLI does (``pyinfra_cli/__init__.py``: ``monkey.patch_all()``). pyinfra's API runs every host in
a greenlet; unpatched, paramiko's connection threads and blocking socket reads hold up gevent's
hub, and the nodes are connected to and read one after another (48 lab nodes: 3.1 s to connect
instead of 0.5 s). The other commands skip it: it costs about 0.1 s at start.

``os``, ``subprocess`` and ``signal`` stay unpatched: the site Ansible steps run ansible-runner in
this process (pexpect: fork, waitpid, a pty), and under gevent's versions of those an apply hung
for good on a pipe read with ansible-playbook already exited. What pyinfra's concurrency needs is
the sockets, threads, locks, queues and ``select``.
"""

from __future__ import annotations

import sys

#: Subcommands that run pyinfra's API across the nodes.
PYINFRA_COMMANDS = frozenset({"apply", "plan"})


def needs_gevent_patching(argv: list[str]) -> bool:
    """Whether the command line runs a pyinfra command (its first word after the program)."""
    return len(argv) > 1 and argv[1] in PYINFRA_COMMANDS


def main() -> None:
    """Entry point: patch for pyinfra when the command needs it, then run the CLI."""
    if needs_gevent_patching(sys.argv):
        from gevent import monkey

        monkey.patch_all(os=False, subprocess=False, signal=False)  # see the module's docstring
    from gpuforge.cli import main as cli_main

    cli_main()


if __name__ == "__main__":
    main()
