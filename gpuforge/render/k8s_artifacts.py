"""Release files of the Kubernetes add-ons (pod network manifest, helm, the GPU Operator chart, the
queue controller's manifests): where each comes from, for the deploy and the offline bundle alike.

Each is an :class:`~gpuforge.render.nvidia_sources.Artifact`: upstream URL, the site's artifacts
mirror, or the offline bundle's ``artifacts/`` (checked against its manifest). URLs are
:mod:`gpuforge.spec.k8s_facts`.
"""

from __future__ import annotations

from gpuforge.render import kubernetes as k8s
from gpuforge.render import nvidia_sources as src
from gpuforge.spec import k8s_facts
from gpuforge.spec.model import Spec


def cni_version(spec: Spec) -> str:
    cni = k8s.kubernetes_section(spec).cni
    return cni.version or k8s_facts.CNI_DEFAULT_VERSIONS[cni.plugin]


def cni_artifact(spec: Spec) -> src.Artifact:
    name, url = k8s_facts.cni_manifest(k8s.kubernetes_section(spec).cni.plugin, cni_version(spec))
    return src.artifact(spec, name, url)


def helm_artifact(spec: Spec) -> src.Artifact:
    name, url = k8s_facts.helm_tarball(spec.versions.helm)
    return src.artifact(spec, name, url)


def gpu_operator_chart_artifact(spec: Spec) -> src.Artifact:
    """The chart archive (``helm fetch`` of NVIDIA's repository names it ``gpu-operator-<v>.tgz``)."""
    name = k8s_facts.gpu_operator_chart_file(spec.versions.gpu_operator)
    return src.artifact(spec, name, f"{k8s_facts.GPU_OPERATOR_REPO}/charts/{name}")


def queue_controller_artifact(spec: Spec) -> src.Artifact:
    bq = k8s.kubernetes_section(spec).batch_queue
    name, url = k8s_facts.queue_controller_manifest(bq.kind, bq.version)
    return src.artifact(spec, name, url)


def addon_artifacts(spec: Spec) -> list[src.Artifact]:
    """Every release file the first control plane's add-ons use (offline: all must be in the bundle)."""
    out = [cni_artifact(spec)]
    if k8s.gpu_operator_needed(spec):
        out += [helm_artifact(spec), gpu_operator_chart_artifact(spec)]
    if k8s.batch_queue_file(spec) is not None:
        out.append(queue_controller_artifact(spec))
    return out
