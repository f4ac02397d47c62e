"""The control planes' maintenance timers: certificate renewal before expiry and etcd snapshots.

Each control plane gets two systemd timers (``kubernetes.certificates``, ``kubernetes.etcd_snapshots``),
their services and scripts. The facts are :mod:`gpuforge.spec.k8s_day2` ('kubeadm-certs',
'kubeadm-certs-output', 'etcd-operate', 'etcd-image'). Timers of different control planes fire at
different times (by the node's place among the control planes), so two never restart their API
servers or snapshot at once.

Invariants of the scripts: a renewal runs only when ``kubeadm certs check-expiration`` lists a
certificate kubeadm manages with fewer days left than the spec says; the control plane's static pods
are restarted one at a time afterwards, and a manifest moved away is always moved back (also by the
next run, should one be interrupted). A snapshot lands under its final name only once etcd's own
``snapshot status`` read it; then all but the newest ``keep`` are removed.
"""

from __future__ import annotations

from gpuforge.render.files import RenderedFile, Secrets, header
from gpuforge.render.kube_vip import interface as kube_vip_interface
from gpuforge.render.kube_vip import manifest as kube_vip_manifest
from gpuforge.spec import k8s_day2 as day2
from gpuforge.spec import k8s_upstream
from gpuforge.spec.model import Role, Spec
from gpuforge.spec.nodes import Node, nodes_with

CERTS = "gpuforge-k8s-certs"
SNAPSHOT = "gpuforge-etcd-snapshot"
SBIN = "/usr/local/libexec/gpuforge"
UNIT_DIR = "/etc/systemd/system"
#: Where the renewal keeps a static pod's manifest while the kubelet stops that pod.
RESTARTING = "/etc/kubernetes/gpuforge-restarting"
CRICTL = f"crictl --runtime-endpoint {k8s_upstream.CRI_SOCKET_CONTAINERD}"
#: Where etcd (in its container) writes a snapshot before it is moved to the snapshot directory:
#: etcd's data directory, mounted at the same path on the host.
SNAPSHOT_PART = f"{day2.ETCD_DATA_DIR}/gpuforge-snapshot.db.part"


def _place(spec: Spec, node: Node) -> int:
    names = [n.name for n in nodes_with(spec, Role.K8S_CONTROL_PLANE)]
    return names.index(node.name) if node.name in names else 0


def certs_script(days: int) -> str:
    """Renew when a certificate kubeadm manages has fewer than ``days`` days left (kubeadm-certs)."""
    return f"""#!/bin/sh
{header().rstrip()}
# Renews kubeadm's certificates on this control plane once one has fewer than {days} days left
# (kubeadm certs check-expiration -o json: residualTime in seconds), then restarts the control
# plane's static pods one at a time (their manifest moved away for the kubelet's fileCheckFrequency).
set -eu
RENEW_DAYS={days}
MANIFESTS={day2.STATIC_POD_DIR}
HELD={RESTARTING}
restore() {{ for f in "$HELD"/*.yaml; do [ -e "$f" ] && mv "$f" "$MANIFESTS/"; done; return 0; }}
restore
trap restore EXIT
json=$(kubeadm certs check-expiration -o json)
left=$(printf '%s' "$json" | tr -d ' \\t\\n' | tr '{{' '\\n' | grep '"residualTime"' \\
  | grep -v -e '"externallyManaged":true' -e '"missing":true' \\
  | sed -n 's/.*"residualTime":\\(-\\{{0,1\\}}[0-9][0-9]*\\).*/\\1/p' | sort -n | head -n 1)
if [ -z "$left" ]; then echo "gpuforge: kubeadm certs check-expiration listed no certificate" >&2; exit 1; fi
days=$((left / 86400))
if [ "$days" -ge "$RENEW_DAYS" ]; then echo "gpuforge: certificates valid for $days more days"; exit 0; fi
echo "gpuforge: a certificate expires in $days days: kubeadm certs renew all"
kubeadm certs renew all
install -d -m 0700 "$HELD"
for pod in {" ".join(day2.CONTROL_PLANE_PODS)}; do
  [ -f "$MANIFESTS/$pod.yaml" ] || continue
  mv "$MANIFESTS/$pod.yaml" "$HELD/$pod.yaml"
  sleep {day2.FILE_CHECK_S + 5}
  mv "$HELD/$pod.yaml" "$MANIFESTS/$pod.yaml"
  sleep {day2.FILE_CHECK_S + 5}
  echo "gpuforge: $pod restarted on the renewed certificates"
done
"""


def snapshot_script(directory: str, keep: int) -> str:
    """An etcd snapshot with the etcd container's own etcdctl (etcd-operate, etcd-image), checked with
    etcdutl, moved to ``directory`` (0600) and pruned to the newest ``keep``."""
    etcd = f'{CRICTL} exec "$c"'
    return f"""#!/bin/sh
{header().rstrip()}
# Takes an etcd snapshot on this control plane and keeps the newest {keep} in {directory}.
set -eu
DIR={directory}
KEEP={keep}
PART={SNAPSHOT_PART}
install -d -m 0700 "$DIR"
c=$({CRICTL} ps --name etcd -q | head -n 1)
if [ -z "$c" ]; then echo "gpuforge: no etcd container runs on this node" >&2; exit 1; fi
rm -f "$PART"
{etcd} etcdctl {day2.ETCD_CLIENT_FLAGS} snapshot save "$PART"
{etcd} etcdutl snapshot status "$PART" -w table
name="etcd-$(date -u +%Y%m%dT%H%M%SZ).db"
mv "$PART" "$DIR/$name.part" && chmod 0600 "$DIR/$name.part" && mv "$DIR/$name.part" "$DIR/$name"
echo "gpuforge: etcd snapshot $DIR/$name"
ls -1 "$DIR" | grep '^etcd-[0-9TZ]*\\.db$' | sort -r | tail -n +$((KEEP + 1)) | while read -r old; do
  rm -f "$DIR/$old" && echo "gpuforge: removed the older snapshot $old"
done
"""


def _service(what: str, script: str) -> str:
    return f"""{header().rstrip()}
[Unit]
Description=gpuforge: {what}
After=kubelet.service

[Service]
Type=oneshot
ExecStart={script}
"""


def _timer(what: str, on_calendar: str) -> str:
    return f"""{header().rstrip()}
[Unit]
Description=gpuforge: {what}

[Timer]
OnCalendar={on_calendar}
Persistent=true

[Install]
WantedBy=timers.target
"""


def snapshot_calendar(schedule: str, place: int) -> str:
    """systemd OnCalendar of a control plane's snapshots: hourly at minute ``7 * place``, daily at
    ``1 + place`` o'clock, weekly on Sundays then."""
    if schedule == "hourly":
        return f"*-*-* *:{(7 * place) % 60:02d}:00"
    hour = f"{(1 + place) % 24:02d}:00:00"
    return f"Sun *-*-* {hour}" if schedule == "weekly" else f"*-*-* {hour}"


def certs_calendar(place: int) -> str:
    """Daily, each control plane at its own hour (three hours apart), from 03:30."""
    return f"*-*-* {(3 + 3 * place) % 24:02d}:30:00"


def _unit(name: str, what: str, script: str, on_calendar: str) -> tuple[str, RenderedFile, RenderedFile, RenderedFile]:
    path = f"{SBIN}/{name}"
    return (
        f"{name}.timer",
        RenderedFile(path, script, mode="0755"),
        RenderedFile(f"{UNIT_DIR}/{name}.service", _service(what, path)),
        RenderedFile(f"{UNIT_DIR}/{name}.timer", _timer(what, on_calendar)),
    )


def maintenance_units(spec: Spec, node: Node) -> list[tuple[str, RenderedFile, RenderedFile, RenderedFile]]:
    """(timer unit, script, service, timer) of each enabled timer on a control plane."""
    k = spec.kubernetes
    if k is None or not node.has(Role.K8S_CONTROL_PLANE):
        return []
    place = _place(spec, node)
    out = []
    certs, snaps = k.certificates, k.etcd_snapshots
    if certs.enabled:
        what = f"renew kubeadm's certificates {certs.renew_days_before} days before they expire"
        out.append(_unit(CERTS, what, certs_script(certs.renew_days_before), certs_calendar(place)))
    if snaps.enabled:
        what = f"etcd snapshot ({snaps.schedule}, the newest {snaps.keep} kept in {snaps.directory})"
        script = snapshot_script(snaps.directory, snaps.keep)
        out.append(_unit(SNAPSHOT, what, script, snapshot_calendar(snaps.schedule, place)))
    return out


def maintenance_files(spec: Spec, node: Node, secrets: Secrets) -> list[RenderedFile]:
    """Every file of the control plane's timers, and kube-vip's manifest as a control plane in the
    cluster has it (``gpuforge render``; the kubeadm layer writes it around init and join)."""
    del secrets  # none here
    files = [f for _, *three in maintenance_units(spec, node) for f in three]
    if kube_vip_interface(spec) is not None and node.has(Role.K8S_CONTROL_PLANE):
        files.append(RenderedFile(day2.KUBE_VIP_MANIFEST, kube_vip_manifest(spec), mode="0600"))
    return files
