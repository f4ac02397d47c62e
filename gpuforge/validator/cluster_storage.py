"""``storage.mounts``: every declared mount is there, writable (or read-only) as declared, and one
filesystem on every node that mounts it.

Three rounds over SSH, each node's commands in parallel:

1. each node reports, per mount point, ``findmnt``'s filesystem type, source and options, and for a
   writable mount whether root can create and remove a file there;
2. for each writable mount, the first node (spec order) that has it mounted writes a token file with a
   random name and content;
3. every other node reads that file: the same content means the same filesystem; then the writer
   removes it. A read-only mount is compared by its source instead.

A node whose mount is missing, of another source than the spec's, not writable where declared
writable (or writable where declared read-only), or that does not see the writer's file fails.
"""

from __future__ import annotations

import secrets
import shlex
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from gpuforge.spec import Spec
from gpuforge.spec.nodes import Node
from gpuforge.spec.storage import Mount
from gpuforge.spec.storage_rules import mount_nodes, mounts_of, nfs_source
from gpuforge.validator.cluster import GATHERERS, ClusterData, Gatherer, NodeRun, cluster_check
from gpuforge.validator.node.base import BLOCKED, CRITICAL, FAIL, PASS, Outcome

MOUNTS = "storage.mounts"
TOKEN_PREFIX = ".gpuforge-validate-"


def probe_command(mounts: list[Mount], nonce: str, node: str) -> str:
    """Per mount: ``__mount=<name>``, findmnt's ``FSTYPE SOURCE OPTIONS`` line (or ``__absent``), and for
    a writable one ``__write=ok`` or ``__write=fail`` (a file created and removed as root)."""
    lines = []
    for m in mounts:
        path = shlex.quote(m.path)
        probe = shlex.quote(f"{m.path}/{TOKEN_PREFIX}{node}-{nonce}")
        lines.append(f"echo {shlex.quote('__mount=' + m.name)}")
        lines.append(f"findmnt -n -o FSTYPE,SOURCE,OPTIONS --mountpoint {path} || echo __absent")
        lines.append(f"( : > {probe} && rm -f {probe} ) 2>/dev/null && echo __write=ok || echo __write=fail")
    return "\n".join(lines)


def parse_probe(text: str) -> dict[str, dict[str, Any]]:
    """:func:`probe_command`'s output by mount name: mounted, fstype, source, options, writable."""
    out: dict[str, dict[str, Any]] = {}
    cur: dict[str, Any] | None = None
    for line in text.splitlines():
        if line.startswith("__mount="):
            cur = out.setdefault(line[8:].strip(), {"mounted": False, "writable": None})
        elif cur is None:
            continue
        elif line.strip() == "__absent":
            cur["mounted"] = False
        elif line.startswith("__write="):
            cur["writable"] = line.strip() == "__write=ok"
        elif line.strip() and "fstype" not in cur:
            fields = line.split()
            cur.update(mounted=True, fstype=fields[0], source=fields[1] if len(fields) > 1 else "")
            cur["options"] = fields[2].split(",") if len(fields) > 2 else []
    return out


def _shared(
    mount: Mount, nodes: list[Node], probes: dict[str, dict[str, Any]], run: NodeRun, nonce: str
) -> dict[str, str]:
    """Rounds 2 and 3 for one writable mount: per node, '' (saw the writer's file) or why not."""
    ready = [n for n in nodes if probes.get(n.name, {}).get(mount.name, {}).get("writable")]
    if not ready:
        return {}
    writer = ready[0]
    token = secrets.token_hex(16)
    path = shlex.quote(f"{mount.path}/{TOKEN_PREFIX}{nonce}")
    rc, out, err = run(writer, f"printf '%s\\n' {token} > {path} && echo __ok")
    if rc != 0 or "__ok" not in out:
        return {
            n.name: f"{writer.name} could not write a file on {mount.path}: {(err or out).strip()[-200:]}"
            for n in nodes
        }
    try:
        with ThreadPoolExecutor(max_workers=min(16, len(nodes))) as pool:
            reads = dict(zip([n.name for n in nodes], pool.map(lambda n: run(n, f"cat {path}"), nodes), strict=True))
    finally:
        run(writer, f"rm -f {path}")
    seen = {}
    for name, (rc, out, _err) in reads.items():
        seen[name] = (
            "" if rc == 0 and out.strip() == token else f"does not see the file {writer.name} wrote on {mount.path}"
        )
    return seen


def read_mounts(data: ClusterData, run: NodeRun) -> dict[str, Any]:
    """Every mount's probes on the selected nodes that mount it, and the cross-node reads."""
    spec, nonce = data.spec, secrets.token_hex(8)
    nodes = [n for n in data.nodes if mounts_of(spec, n.name)]
    if not nodes:
        return {"probes": {}, "shared": {}}

    def probe(n: Node) -> dict[str, dict[str, Any]]:
        rc, out, err = run(n, probe_command(mounts_of(spec, n.name), nonce, n.name))
        if rc in (255, 124):
            return {"__error__": {"error": (err or out).strip()[-200:] or f"exit {rc}"}}
        return parse_probe(out)

    with ThreadPoolExecutor(max_workers=min(16, len(nodes))) as pool:
        probes = dict(zip([n.name for n in nodes], pool.map(probe, nodes), strict=True))
    shared: dict[str, dict[str, str]] = {}
    for m in spec.storage.mounts:
        on = [n for n in nodes if n.name in mount_nodes(spec, m)]
        if m.writable and len(on) > 1:
            shared[m.name] = _shared(m, on, probes, run, nonce)
    return {"probes": probes, "shared": shared}


GATHERERS.append(Gatherer("storage", frozenset({MOUNTS}), read_mounts))


def judge_mount(spec: Spec, mount: Mount, got: dict[str, Any], seen: str | None) -> str:
    """'' when one mount on one node is as declared, else what is wrong."""
    if not got.get("mounted"):
        return f"{mount.path} is not mounted"
    want = nfs_source(spec, mount)
    if want is not None and got.get("source") != want:
        return f"{mount.path} is {got.get('source')} ({got.get('fstype')}), not {want}"
    ro = "ro" in got.get("options", [])
    if mount.writable and (ro or not got.get("writable")):
        return f"{mount.path} is not writable ({'mounted ro' if ro else 'root cannot create a file there'})"
    if not mount.writable and not ro:
        return f"{mount.path} is declared read-only but mounted rw"
    return seen or ""


def gate_mounts(spec: Spec, node: Node) -> str | None:
    return None if mounts_of(spec, node.name) else "mounts no shared storage"


@cluster_check(MOUNTS, "config", CRITICAL,
               "Every storage mount is mounted, writable or read-only as declared, and the same filesystem on "
               "every node (a file one node writes is read on the others)",
               depends_on=("connection.ssh",), gate=gate_mounts)  # fmt: skip
def mounts(data: ClusterData, node: Node) -> Outcome:
    got = data.gathered.get("storage")
    if got is None:
        return BLOCKED, "the mounts were not read"
    probes = got["probes"].get(node.name, {})
    if "__error__" in probes:
        return FAIL, f"could not read the mounts: {probes['__error__']['error']}"
    problems, fine = [], []
    for m in mounts_of(data.spec, node.name):
        seen = got["shared"].get(m.name, {}).get(node.name)
        why = judge_mount(data.spec, m, probes.get(m.name, {}), seen)
        if why:
            problems.append(why)
        else:
            p = probes[m.name]
            shared = " (same file seen on every node)" if got["shared"].get(m.name) else ""
            fine.append(f"{m.path} {p.get('fstype')} {p.get('source')} {'rw' if m.writable else 'ro'}{shared}")
    if problems:
        return FAIL, "; ".join(problems)
    return PASS, "; ".join(fine)
