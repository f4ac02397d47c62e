"""The cached Debian 12 base root filesystem every lab node starts from.

Debian minbase plus systemd, sshd, python3, sudo and a few small tools pyinfra uses. Built once
with mmdebstrap from the host's own Debian mirror into
``/var/cache/gpuforge/rootfs/<key>/rootfs`` where ``<key>`` hashes the suite, variant, package
list and recipe version. The build goes to a temporary directory that is renamed into place, under
a file lock, so concurrent or interrupted builds never leave a half-built cache behind.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from collections.abc import Callable

from .sources import HostMirrors, host_mirrors
from .system import BUILD_TOOLS, LabError, file_lock, remove_tree, require_tools, run

CACHE_DIR = "/var/cache/gpuforge/rootfs"
VARIANT = "minbase"
# Bump when the customize steps below change what the cached tree contains.
RECIPE = 2
PACKAGES: tuple[str, ...] = (
    "systemd",
    "systemd-sysv",
    "openssh-server",
    "dbus",
    "iproute2",
    "python3",
    "sudo",
    "ca-certificates",
    # small things pyinfra facts/operations and debugging use
    "procps",
    "netbase",
    "iputils-ping",
    "gpgv",
    "debian-archive-keyring",
)
# Run on the new tree. Node identity (host keys, machine-id, hostname) is written per node, never
# shared. apt's daily timers are masked: they would grab the dpkg lock in the middle of a deploy.
_CUSTOMIZE = (
    'rm -f "$1"/etc/ssh/ssh_host_* "$1"/etc/apt/sources.list && '
    'rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin && '
    'printf "" > "$1"/etc/machine-id && '
    'ln -sf /dev/null "$1"/etc/systemd/system/apt-daily.timer && '
    'ln -sf /dev/null "$1"/etc/systemd/system/apt-daily-upgrade.timer'
)


def cache_key(suite: str, packages: tuple[str, ...] = PACKAGES, variant: str = VARIANT) -> str:
    """Stable key of a rootfs recipe: same inputs -> same key, order of packages irrelevant."""
    blob = json.dumps(
        {"suite": suite, "variant": variant, "packages": sorted(set(packages)), "recipe": RECIPE},
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def cached_rootfs(suite: str, cache_dir: str = CACHE_DIR, extra: tuple[str, ...] = ()) -> str | None:
    """Path of the cached rootfs for ``suite`` (lab packages plus ``extra``) if it exists."""
    path = os.path.join(cache_dir, cache_key(suite, PACKAGES + extra), "rootfs")
    return path if os.path.isfile(os.path.join(path, "etc/os-release")) else None


def ensure_rootfs(
    suite: str,
    mirrors: HostMirrors | None = None,
    cache_dir: str = CACHE_DIR,
    log: Callable[[str], None] = print,
    extra: tuple[str, ...] = (),
) -> str:
    """Return the cached rootfs for ``suite``, building it first if needed.

    ``extra``: packages on top of the lab's (the Vagrant box adds a kernel); another cache entry.
    """
    packages = PACKAGES + tuple(p for p in extra if p not in PACKAGES)
    found = cached_rootfs(suite, cache_dir, extra)
    if found:
        return found
    key = cache_key(suite, packages)
    final = os.path.join(cache_dir, key)
    with file_lock(os.path.join(cache_dir, f"{key}.lock")):
        found = cached_rootfs(suite, cache_dir, extra)
        if found:
            return found
        require_tools(BUILD_TOOLS)
        m = mirrors or host_mirrors()
        tmp = os.path.join(cache_dir, f".build-{key}-{os.getpid()}")
        remove_tree(tmp)
        os.makedirs(tmp)
        log(f"building Debian {suite} rootfs with mmdebstrap (once; cached as {final})")
        t0 = time.monotonic()
        sources = [
            f"deb {m.debian} {suite} main",
            f"deb {m.debian} {suite}-updates main",
            f"deb {m.security} {suite}-security main",
        ]
        try:
            run(
                [
                    "mmdebstrap",
                    "--mode=root",
                    "--format=directory",
                    f"--variant={VARIANT}",
                    f"--include={','.join(packages)}",
                    f"--customize-hook={_CUSTOMIZE}",
                    suite,
                    os.path.join(tmp, "rootfs"),
                    *sources,
                ],
                timeout=1800,
            )
            with open(os.path.join(tmp, "manifest.json"), "w") as f:
                json.dump({"suite": suite, "variant": VARIANT, "packages": list(packages), "recipe": RECIPE}, f)
            if os.path.exists(final):  # leftover without a valid tree
                shutil.rmtree(final)
            os.rename(tmp, final)
        except BaseException:
            remove_tree(tmp)
            raise
        log(f"rootfs built in {time.monotonic() - t0:.0f} s")
    path = cached_rootfs(suite, cache_dir, extra)
    if path is None:
        raise LabError(f"rootfs build finished but {final}/rootfs has no etc/os-release")
    return path
