"""What a baked image must not carry, as rules: removed, emptied or rewritten after the build,
then checked absent (:func:`findings`).

Invariants: after :func:`strip_tree` the tree has no SSH host key, an empty machine-id, no munge
key or seed, no health HMAC key, no DKMS module-signing key, no authorized key of the build, no apt proxy of the
build, no gpuforge run state
(``/var/lib/gpuforge``, ``/etc/gpuforge/k8s``), no package lists or downloaded packages; each node
makes its own identity at boot (the lab writes it; elsewhere systemd makes the machine-id and
:data:`HOST_KEYS_UNIT` the host keys). :func:`findings` is the check a test and every build run.
"""

from __future__ import annotations

import glob
import os
import shutil
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from gpuforge.image.safe_files import write_in_tree
from gpuforge.lab.vagrant_box import HOST_KEYS_UNIT  # the one unit: Vagrant boxes and images alike
from gpuforge.spec.citation import Citation

#: DKMS's module-signing key (its default ``mok_signing_key``): a private key every node of the image
#: would share, able to sign kernel modules its Secure Boot trusts. Removed: DKMS makes a node its own.
DKMS_MOK_KEY = "var/lib/dkms/mok.key"
SOURCES: dict[str, Citation] = {
    "dkms-mok-key": Citation(
        "dell/dkms dkms_framework.conf (the framework's documented defaults)",
        "https://github.com/dell/dkms/blob/master/dkms_framework.conf",
        "Location of the key and certificate files used for Secure boot ... (default: /var/lib/dkms): "
        "# mok_signing_key=/var/lib/dkms/mok.key # mok_certificate=/var/lib/dkms/mok.pub",
    ),
}
#: Identity and secrets (globs, relative to the tree's root): removed, then checked absent.
IDENTITY: tuple[str, ...] = (
    "etc/ssh/ssh_host_*",
    "etc/ssh/sshd_config.d/gpuforge-lab.conf",
    "etc/munge/munge.key",
    "var/lib/munge/munge.seed",
    "etc/gpuforge/health.key",
    "root/.ssh/authorized_keys",
    "etc/apt/apt.conf.d/01gpuforge-proxy",
    "etc/gpuforge/k8s",
    "var/lib/gpuforge",
    "var/lib/dbus/machine-id",
    "var/lib/systemd/random-seed",
    "var/lib/systemd/credential.secret",
    DKMS_MOK_KEY,
)
#: Daemons that join the cluster, not started at boot from the image: apply enables and starts them
#: once the node's current config and key are in place. Their packages enable them when installed
#: (Debian's postinst); started at boot they would run the config the image was baked with (a slurmd
#: registering with another slurm.conf hash than slurmctld's: found on image-booted lab nodes) or fail
#: without the munge key.
NOT_AT_BOOT: tuple[str, ...] = ("munge", "slurmd", "slurmctld", "slurmdbd")
#: Run state and caches: removed from every image too.
REMOVE: tuple[str, ...] = (
    *IDENTITY,
    *(f"etc/systemd/system/multi-user.target.wants/{name}.service" for name in NOT_AT_BOOT),
    "var/spool/slurmd/*",
    "var/lib/slurm/slurmd/*",
    "var/lib/apt/lists/*",
    "var/cache/apt/*.bin",
    "var/cache/apt/archives/*.deb",
    "var/log/journal/*",
    "tmp/*",
    "var/tmp/*",
)
#: Files that stay, rewritten to this content (identity made per node at boot).
REWRITE: dict[str, str] = {
    "etc/machine-id": "",
    "etc/hostname": "localhost\n",
    "etc/hosts": "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n",
    "etc/resolv.conf": "",
}
HOST_KEYS_UNIT_PATH = "etc/systemd/system/gpuforge-ssh-host-keys.service"
HOST_KEYS_WANTS = "etc/systemd/system/multi-user.target.wants/gpuforge-ssh-host-keys.service"
#: Trees the secret scan skips: package payloads no build writes secrets into.
SCAN_SKIP = ("usr/share/doc", "usr/share/locale", "usr/share/man", "usr/lib/x86_64-linux-gnu", "proc", "sys", "dev")
SCAN_MAX_BYTES = 32 << 20


def _matches(root: str, pattern: str) -> list[str]:
    return sorted(glob.glob(os.path.join(root, pattern)))


def strip_tree(root: str, kept: set[str] | frozenset[str] = frozenset()) -> list[str]:
    """Apply the rules to the tree at ``root``; return what was removed or rewritten (relative).
    ``kept``: absolute paths the image's layers wrote (``/etc/hosts`` from the spec): not rewritten."""
    done: list[str] = []
    for pattern in REMOVE:
        for path in _matches(root, pattern):
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
            else:
                os.unlink(path)
            done.append(os.path.relpath(path, root))
    for rel, text in REWRITE.items():
        if "/" + rel in kept:
            continue
        write_in_tree(root, rel, text.encode(), 0o444 if rel == "etc/machine-id" else 0o644)
        done.append(rel)
    write_in_tree(root, HOST_KEYS_UNIT_PATH, HOST_KEYS_UNIT.encode(), 0o644)
    wants = os.path.join(root, HOST_KEYS_WANTS)
    os.makedirs(os.path.dirname(wants), exist_ok=True)
    if not os.path.lexists(wants):
        os.symlink("/" + HOST_KEYS_UNIT_PATH, wants)
    return done


@dataclass(frozen=True)
class Finding:
    path: str
    why: str

    def __str__(self) -> str:
        return f"{self.path}: {self.why}"


def _files(root: str) -> Iterator[str]:
    skip = {os.path.join(root, s) for s in SCAN_SKIP}
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if os.path.join(folder, d) not in skip)
        for name in sorted(files):
            path = os.path.join(folder, name)
            if os.path.isfile(path) and not os.path.islink(path):
                yield path


def identity_findings(root: str) -> list[Finding]:
    """Per-node identity or run state the tree still holds."""
    out: list[Finding] = []
    for pattern in IDENTITY:
        out += [Finding(os.path.relpath(p, root), "must not be in an image") for p in _matches(root, pattern)]
    mid = os.path.join(root, "etc/machine-id")
    if os.path.exists(mid) and os.path.getsize(mid) != 0:
        out.append(Finding("etc/machine-id", "not empty (each node makes its own)"))
    return out


def secret_findings(root: str, secrets: Iterable[bytes]) -> list[Finding]:
    """Files holding any of ``secrets`` (each at least 8 bytes; shorter ones are not looked for)."""
    needles = [s for s in secrets if len(s) >= 8]
    out: list[Finding] = []
    for path in _files(root):
        try:
            if os.path.getsize(path) > SCAN_MAX_BYTES:
                continue
            with open(path, "rb") as f:
                data = f.read()
        except OSError:
            continue
        if any(n in data for n in needles):
            out.append(Finding(os.path.relpath(path, root), "holds a secret of the spec"))
    return out


def findings(root: str, secrets: Iterable[bytes]) -> list[Finding]:
    """Everything the image must not carry that ``root`` still does (empty: the image is clean)."""
    return identity_findings(root) + secret_findings(root, secrets)
