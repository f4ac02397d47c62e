"""The add-ons installed from helm charts: the NVIDIA GPU Operator (and its driver upgrade), the KubeRay
operator and Kubeflow Trainer. Facts: :mod:`gpuforge.spec.k8s_frameworks`, :mod:`gpuforge.spec.k8s_upstream`.

Invariants:

* A chart archive is used only once its sha256 is the known one (``arts.chart_pull_command``,
  ``nvidia_sources.fetch_command``): pulled from upstream's repository (an OCI reference for Trainer),
  the site's chart mirror (``sources.mirrors.helm``) or the offline bundle.
* A chart whose CRDs live in its ``crds/`` folder gets them applied from the same checked archive
  before ``helm upgrade --install`` (helm installs that folder once and never upgrades it): the GPU
  Operator's as NVIDIA's upgrade guide applies them (``kubectl apply -f``), KubeRay's with server-side
  apply (too large for client-side apply's annotation). Trainer's CRDs are templates helm upgrades.
* With an operator-managed driver, the GPU Operator's upgrade is followed by a bounded wait until every
  GPU node reports ``upgrade-done`` and runs the spec's driver; a node in ``upgrade-failed`` fails it
  at once, naming NVIDIA's recovery command. The stamp is written only after the wait succeeded.
"""

from __future__ import annotations

import shlex

from gpuforge.deploy.layers.helm_release import HELM, KUBECONFIG, HelmRelease
from gpuforge.deploy.layers.k8s_addon import AddOn, fetch_artifact, sha16
from gpuforge.render import k8s_artifacts as arts
from gpuforge.render import k8s_frameworks as frameworks
from gpuforge.render import kubernetes as k8s
from gpuforge.render import nvidia_sources as src
from gpuforge.render.files import RenderedFile
from gpuforge.render.nvidia import dump_yaml
from gpuforge.spec import Spec, k8s_upstream
from gpuforge.spec import k8s_frameworks as fw
from gpuforge.spec.model import ManagedBy, SourceMode

#: Seconds between two reads of the GPU nodes' driver upgrade states.
UPGRADE_POLL_S = 30


def chart_fetch(
    s: Spec, name: str, chart: str, upstream: str, offline: src.Artifact
) -> tuple[str | None, tuple[RenderedFile, ...], str | None, str]:
    """(command leaving the checked archive ``name`` on the node or None, bundle files pushed for it,
    why there is none, where it lands)."""
    mode = s.sources.mode
    if mode is SourceMode.OFFLINE:
        fetch, pushed = fetch_artifact(offline)
        return fetch, pushed, offline.reason, offline.node_path
    if mode is SourceMode.MIRROR and not s.sources.mirrors.helm:
        why = f"mirror mode without sources.mirrors.helm: no source for the {chart} chart"
        return None, (), why, offline.node_path
    url = str(s.sources.mirrors.helm).rstrip("/") if mode is SourceMode.MIRROR else upstream
    a = arts.chart_from_repository(s, name, url)
    fetch = arts.chart_pull_command(a, HELM, chart) if a.available else None
    return fetch, (), a.reason, a.node_path


def crd_apply_command(chart: str, folders: tuple[str, ...], server_side: bool) -> str:
    """Applies the CRD folders of the chart archive at ``chart`` (extracted to a temporary directory that
    is removed whatever happens); fails when one is missing or kubectl fails."""
    apply = "kubectl apply --server-side --force-conflicts" if server_side else "kubectl apply"
    files = " ".join(f'-f "$d/{f}/"' for f in folders)
    members = " ".join(shlex.quote(f) for f in folders)
    return (
        f'{{ d=$(mktemp -d) && tar -xzf {shlex.quote(chart)} -C "$d" {members} && {KUBECONFIG} {apply} {files}; '
        'rc=$?; rm -rf "$d"; [ "$rc" -eq 0 ]; }'
    )


def helm_install(argv: list[str]) -> str:
    """``helm upgrade --install`` with the admin kubeconfig, bounded (``--wait --timeout``)."""
    return " ".join([KUBECONFIG, HELM, *(shlex.quote(x) for x in argv), "--wait", "--timeout", "15m"])


def gpu_operator_addon(s: Spec) -> AddOn:
    """The operator's CRDs from the pinned chart, then ``helm upgrade --install`` of it with the rendered
    values (k8s_frameworks 'gpu-operator-upgrade-crds': Option 1's order; the chart's own CRD hook still
    runs, hence ``--disable-openapi-validation``)."""
    version = s.versions.gpu_operator
    values = k8s.gpu_operator_values_yaml(s)
    digest = f"{version} values:{sha16(values)}"
    summary = f"GPU Operator {version} (its CRDs, then helm upgrade --install, values {k8s.GPU_OPERATOR_VALUES})"
    release = HelmRelease(k8s.GPU_OPERATOR_RELEASE, k8s.kubernetes_section(s).gpu_operator.namespace)
    name = k8s_upstream.gpu_operator_chart_file(version)
    fetch, pushed, reason, path = chart_fetch(
        s, name, k8s_upstream.GPU_OPERATOR_CHART_NAME, k8s_upstream.GPU_OPERATOR_REPO,
        arts.gpu_operator_chart_artifact(s),
    )  # fmt: skip
    if fetch is None:
        return AddOn("gpu-operator", summary, digest, None, reason, release=release)
    argv = k8s.helm_gpu_operator_argv(s, chart=path)[1:]
    crds = crd_apply_command(path, fw.GPU_OPERATOR_CRD_DIRS, server_side=False)
    command = f"{fetch} && {crds} && {helm_install(argv)}"
    return AddOn("gpu-operator", summary, digest, command, pushed=pushed, release=release)


def driver_wait_script(s: Spec) -> str:
    """The bounded wait for the operator's driver upgrade (k8s_frameworks 'gpu-driver-upgrades',
    'gpu-operator-driver-pods'): done when every GPU node is ``upgrade-done`` and every driver pod runs
    the spec's driver; a node in ``upgrade-failed`` fails it at once."""
    op = k8s.kubernetes_section(s).gpu_operator
    version = s.versions.driver.version if s.versions.driver is not None else ""
    tries = max(1, op.driver_upgrade.wait_minutes * 60 // UPGRADE_POLL_S)
    states = fw.upgrade_states_command(f"{KUBECONFIG} kubectl")
    images = (
        f"{KUBECONFIG} kubectl get pods -n {shlex.quote(op.namespace)} -l {fw.DRIVER_POD_SELECTOR} "
        "-o jsonpath='{range .items[*]}{.spec.containers[0].image}{\"\\n\"}{end}'"
    )
    retry = shlex.quote(fw.retry_upgrade_command("<node>"))
    tag = shlex.quote(f":{version}-")  # nvcr.io/nvidia/driver:<version>-<os> (gpu-operator-driver-pods)
    stale = (
        f"stale=$(printf '%s\\n' \"$images\" | grep -v '^$' | grep -c -v -F {tag} || true); "
        if version
        else "stale=0; "
    )
    return (
        f"( i=0; while [ $i -lt {tries} ]; do "
        f"states=$({states}) || states=''; images=$({images}) || images=''; "
        f"failed=$(printf '%s\\n' \"$states\" | awk -F'\\t' '$2 == \"{fw.UPGRADE_FAILED}\" {{print $1}}'); "
        f'if [ -n "$failed" ]; then echo "gpuforge: the driver upgrade failed on $failed; once the cause is '
        f'fixed:" {retry} >&2; exit 1; fi; '
        f"pending=$(printf '%s\\n' \"$states\" | awk -F'\\t' 'NF && $2 != \"{fw.UPGRADE_DONE}\" {{print $1}}'); "
        f"{stale}"
        f'if [ -n "$states" ] && [ -z "$pending" ] && [ -n "$images" ] && [ "$stale" -eq 0 ]; then '
        f'echo "gpuforge: driver {version} on every GPU node ({fw.UPGRADE_DONE})"; exit 0; fi; '
        f"i=$((i + 1)); sleep {UPGRADE_POLL_S}; done; "
        f'echo "gpuforge: the driver upgrade has not finished after {op.driver_upgrade.wait_minutes} minutes:" '
        "$pending >&2; exit 1 )"
    )


def driver_upgrade_addon(s: Spec, operator: AddOn) -> AddOn | None:
    """After the operator's upgrade, the wait for its driver upgrade controller; None unless the operator
    manages the driver with automatic upgrades and the spec waits."""
    op = k8s.kubernetes_section(s).gpu_operator
    up = op.driver_upgrade
    if op.driver is not ManagedBy.OPERATOR or not up.auto_upgrade or up.wait_minutes == 0:
        return None
    version = s.versions.driver.version if s.versions.driver is not None else "?"
    summary = f"the GPU driver {version} on every GPU node (the operator's upgrade controller: upgrade-done)"
    return AddOn("gpu-driver-upgrade", summary, f"operator:{sha16(operator.digest)}", driver_wait_script(s))


def kuberay_addon(s: Spec) -> AddOn:
    """KubeRay's CRDs from the pinned chart (server-side apply), then ``helm upgrade --install`` of it
    (k8s_frameworks 'kuberay-upgrade': CRDs first; 'kuberay-crd-size')."""
    kr = k8s.kubernetes_section(s).frameworks.kuberay
    values = frameworks.KUBERAY_VALUES
    summary = f"KubeRay operator {kr.version} (its CRDs, then helm upgrade --install, values {values})"
    digest = f"{kr.version} values:{sha16(dump_yaml(frameworks.kuberay_values(s)))}"
    release = HelmRelease(fw.KUBERAY_RELEASE, kr.namespace)
    name = arts.kuberay_chart_file(s)
    fetch, pushed, reason, path = chart_fetch(
        s, name, fw.KUBERAY_CHART, fw.KUBERAY_REPO, arts.kuberay_chart_artifact(s)
    )
    if fetch is None:
        return AddOn("kuberay", summary, digest, None, reason, release=release)
    argv = ["upgrade", "--install", fw.KUBERAY_RELEASE, path, "--namespace", kr.namespace, "--create-namespace",
            "--version", kr.version, "-f", values]  # fmt: skip
    crds = crd_apply_command(path, (fw.KUBERAY_CRD_DIR,), server_side=True)
    return AddOn("kuberay", summary, digest, f"{fetch} && {crds} && {helm_install(argv)}", pushed=pushed,
                 release=release)  # fmt: skip


def trainer_addon(s: Spec) -> AddOn:
    """``helm upgrade --install`` of the pinned Kubeflow Trainer chart (k8s_frameworks 'trainer-install':
    its CRDs are chart templates, upgraded with it)."""
    tr = k8s.kubernetes_section(s).frameworks.trainer
    values = frameworks.TRAINER_VALUES
    summary = f"Kubeflow Trainer {tr.version} (helm upgrade --install, values {values})"
    digest = f"{tr.version} values:{sha16(dump_yaml(frameworks.trainer_values(s)))}"
    release = HelmRelease(fw.TRAINER_RELEASE, tr.namespace)
    name = arts.trainer_chart_file(s)
    offline = arts.trainer_chart_artifact(s)
    fetch, pushed, reason, path = chart_fetch(s, name, fw.TRAINER_CHART, fw.TRAINER_OCI, offline)
    if fetch is None:
        return AddOn("trainer", summary, digest, None, reason, release=release)
    argv = ["upgrade", "--install", fw.TRAINER_RELEASE, path, "--namespace", tr.namespace, "--create-namespace",
            "--version", tr.version, "-f", values]  # fmt: skip
    return AddOn("trainer", summary, digest, f"{fetch} && {helm_install(argv)}", pushed=pushed, release=release)


def chart_addons(s: Spec) -> list[AddOn]:
    """The chart add-ons of the spec, in order: the GPU Operator (and its driver wait), KubeRay, Trainer."""
    out: list[AddOn] = []
    if k8s.gpu_operator_needed(s):
        operator = gpu_operator_addon(s)
        wait = driver_upgrade_addon(s, operator)
        out += [operator, *([wait] if wait else [])]
    f = k8s.kubernetes_section(s).frameworks
    out += [kuberay_addon(s)] if f.kuberay.enabled else []
    out += [trainer_addon(s)] if f.trainer.enabled else []
    return out
