"""Release files of the Kubernetes add-ons (pod network manifest, helm, the GPU Operator, KubeRay and
Kubeflow Trainer charts, the queue controller's manifests): where each comes from, for the deploy and
the offline bundle alike.

Each is an :class:`~gpuforge.render.nvidia_sources.Artifact`: upstream URL, the site's artifacts
mirror, or the offline bundle's ``artifacts/`` (checked against its manifest), used only once its
sha256 is the known one (``gpuforge.spec.artifact_digests`` or the spec's ``sources.artifact_sha256``).
URLs are :mod:`gpuforge.spec.k8s_upstream`.
"""

from __future__ import annotations

import shlex

from gpuforge.render import kubernetes as k8s
from gpuforge.render import nvidia_sources as src
from gpuforge.spec import artifact_digests, k8s_upstream
from gpuforge.spec import k8s_frameworks as fw
from gpuforge.spec import network_operator as no
from gpuforge.spec.model import Role, Spec
from gpuforge.spec.network_operator_rules import network_operator_on
from gpuforge.spec.nodes import nodes_with


def cni_version(spec: Spec) -> str:
    cni = k8s.kubernetes_section(spec).cni
    return cni.version or k8s_upstream.CNI_DEFAULT_VERSIONS[cni.plugin]


def cni_artifact(spec: Spec) -> src.Artifact:
    name, url = k8s_upstream.cni_manifest(k8s.kubernetes_section(spec).cni.plugin, cni_version(spec))
    return src.artifact(spec, name, url)


def helm_go_arch(spec: Spec) -> str:
    """The Go architecture of the node helm runs on (the first control plane's platform)."""
    planes = nodes_with(spec, Role.K8S_CONTROL_PLANE)
    first = planes[0] if planes else None
    return first.platform.names.go if first is not None else "amd64"


def helm_artifact(spec: Spec) -> src.Artifact:
    name, url = k8s_upstream.helm_tarball(spec.versions.helm, helm_go_arch(spec))
    return src.artifact(spec, name, url)


def gpu_operator_chart_artifact(spec: Spec) -> src.Artifact:
    """The chart archive (``helm fetch`` of NVIDIA's repository names it ``gpu-operator-<v>.tgz``)."""
    name = k8s_upstream.gpu_operator_chart_file(spec.versions.gpu_operator)
    return src.artifact(spec, name, f"{k8s_upstream.GPU_OPERATOR_REPO}/charts/{name}")


def gpu_operator_chart_from_repository(spec: Spec, repo_url: str) -> src.Artifact:
    """The GPU Operator's chart archive as ``helm pull`` fetches it from a chart repository."""
    return chart_from_repository(spec, k8s_upstream.gpu_operator_chart_file(spec.versions.gpu_operator), repo_url)


def chart_from_repository(spec: Spec, name: str, repo_url: str) -> src.Artifact:
    """A chart archive as ``helm pull`` fetches it from a chart repository (upstream's, an OCI reference,
    or the site's mirror), with the sha256 it must have; unavailable, saying how to pin it, when none is
    known."""
    sha = src.known_sha256(spec, name)
    if sha is None:
        reason = f"no sha256 is known for {name}, so gpuforge never installs it: {artifact_digests.pin_hint(name)}"
        return src.Artifact(name, url=repo_url, reason=reason)
    return src.Artifact(name, url=repo_url, sha256=sha)


def chart_pull_command(chart: src.Artifact, helm: str, chart_name: str = k8s_upstream.GPU_OPERATOR_CHART_NAME) -> str:
    """Shell command leaving the chart archive at ``chart.node_path``, checked before helm installs it.

    ``helm pull`` from the repository ``chart.url`` (``--repo``; an ``oci://`` reference names the chart
    itself: k8s_frameworks 'helm-oci') lands in a directory beside its place; the archive is moved into
    place only once its sha256 is ``chart.sha256``, else the directory is removed and the command fails
    (the same invariant as ``nvidia_sources.fetch_command``).
    """
    if not chart.available or chart.sha256 is None or chart.url is None:
        raise ValueError(f"{chart.name}: {chart.reason or 'no known sha256'}")
    part = f"{chart.node_path}.part.d"
    pulled = f"{part}/{chart.name}"
    refused = shlex.quote(f"gpuforge: {chart.name} is not the file of sha256 {chart.sha256}: removed, not used")
    version = chart.name.removeprefix(f"{chart_name}-").removesuffix(".tgz")
    remove = f"rm -rf {shlex.quote(part)}"
    source = (
        shlex.quote(chart.url) if chart.url.startswith("oci://") else f"{chart_name} --repo {shlex.quote(chart.url)}"
    )
    return (
        f"install -d -m 0755 {src.DOWNLOAD_DIR} && {remove} && "
        f"{helm} pull {source} --version {shlex.quote(version)} --destination {shlex.quote(part)} && "
        f"{{ {src.sha256_check(chart.sha256, pulled)} || {{ echo {refused} >&2; {remove}; false; }}; }} && "
        f"mv {shlex.quote(pulled)} {shlex.quote(chart.node_path)} && {remove}"
    )


def kuberay_chart_file(spec: Spec) -> str:
    return fw.chart_file(fw.KUBERAY_CHART, k8s.kubernetes_section(spec).frameworks.kuberay.version)


def trainer_chart_file(spec: Spec) -> str:
    return fw.chart_file(fw.TRAINER_CHART, k8s.kubernetes_section(spec).frameworks.trainer.version)


def kuberay_chart_artifact(spec: Spec) -> src.Artifact:
    """The KubeRay chart archive as its repository's index links it (k8s_frameworks 'kuberay-helm-index')."""
    name = kuberay_chart_file(spec)
    return src.artifact(spec, name, f"{fw.KUBERAY_RELEASES}/{name.removesuffix('.tgz')}/{name}")


def trainer_chart_artifact(spec: Spec) -> src.Artifact:
    """The Trainer chart archive: an OCI artifact, with no plain download (a bundle gets it by hand)."""
    return src.artifact(spec, trainer_chart_file(spec), None)


def framework_chart_artifacts(spec: Spec) -> list[src.Artifact]:
    """The chart archives of the enabled frameworks."""
    f = k8s.kubernetes_section(spec).frameworks
    return [*([kuberay_chart_artifact(spec)] if f.kuberay.enabled else []),
            *([trainer_chart_artifact(spec)] if f.trainer.enabled else [])]  # fmt: skip


def network_operator_chart_artifact(spec: Spec) -> src.Artifact:
    """The Network Operator chart archive as NGC's repository names it (network_operator 'network-operator-install')."""
    name = no.chart_file(k8s.kubernetes_section(spec).network_operator.version)
    return src.artifact(spec, name, f"{no.NETWORK_OPERATOR_REPO}/charts/{name}")


def queue_controller_artifact(spec: Spec) -> src.Artifact:
    bq = k8s.kubernetes_section(spec).batch_queue
    name, url = k8s_upstream.queue_controller_manifest(bq.kind, bq.version)
    return src.artifact(spec, name, url)


def addon_artifacts(spec: Spec) -> list[src.Artifact]:
    """Every release file the first control plane's add-ons use (offline: all must be in the bundle)."""
    out = [cni_artifact(spec)]
    if k8s.gpu_operator_needed(spec):
        out += [helm_artifact(spec), gpu_operator_chart_artifact(spec)]
    frameworks = framework_chart_artifacts(spec)
    if (frameworks or network_operator_on(spec)) and not k8s.gpu_operator_needed(spec):
        out.append(helm_artifact(spec))
    out += frameworks
    out += [network_operator_chart_artifact(spec)] if network_operator_on(spec) else []
    if k8s.batch_queue_file(spec) is not None:
        out.append(queue_controller_artifact(spec))
    return out
