"""Spec sections of the Kubernetes add-ons beside the queues: the GPU Operator's driver upgrade policy
and the training and serving frameworks (KubeRay, Kubeflow Trainer), imported into
``gpuforge.spec.k8s_model``.

Facts (charts, versions, Kueue's integration names, NVIDIA's upgrade controller) are
:mod:`gpuforge.spec.k8s_frameworks`. Every value is typed for where it lands: versions in a helm
argument and an archive name, namespaces in helm's ``--namespace``, numbers and percentages in the
operator's values file.
"""

from __future__ import annotations

from gpuforge.spec.k8s_frameworks import KUBERAY_DEFAULT_VERSION, TRAINER_DEFAULT_VERSION
from gpuforge.spec.policy import live, rebuild
from gpuforge.spec.strict import StrictModel

#: A Kubernetes namespace (DNS-1123 label).
NAMESPACE = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
#: A chart release as helm and its archive name take it.
CHART_VERSION = r"^\d+\.\d+\.\d+$"


class DriverUpgrade(StrictModel):
    """The GPU Operator's driver upgrade controller (chart value ``driver.upgradePolicy``, NVIDIA's "GPU
    Driver Upgrades"): how the operator rolls a new containerised driver over the GPU nodes. Only with
    ``gpu_operator.driver: operator`` (the operator does not manage a host driver)."""

    auto_upgrade: bool = live(
        True,
        "The upgrade controller rolls a new driver node by node (autoUpgrade); off, driver pods change only "
        "when deleted by hand. On, 'gpuforge apply' waits after the operator's upgrade until every GPU node "
        "reports upgrade-done",
    )
    max_parallel_upgrades: int = live(1, "Nodes upgraded at once (maxParallelUpgrades; 0: no limit)", ge=0, le=1000)
    max_unavailable: str = live(
        "25%",
        "GPU nodes that may be unavailable during the upgrade, a number or a percentage (maxUnavailable)",
        pattern=r"^(100|[1-9]?[0-9])%$|^[0-9]{1,4}$",
    )
    pod_deletion_timeout_s: int = live(
        300, "How long the controller waits for the GPU pods it deletes (gpuPodDeletion.timeoutSeconds)", ge=0,
        le=86400,
    )  # fmt: skip
    drain: bool = live(
        False,
        "Drain a node (every pod, not only GPU pods) when deleting its GPU pods is not enough (drain.enable; "
        "NVIDIA: use only when pod deletion is insufficient)",
    )
    drain_timeout_s: int = live(300, "Bound of that drain (drain.timeoutSeconds)", ge=0, le=86400)
    wait_minutes: int = live(
        120, "How long 'gpuforge apply' waits for every GPU node to report upgrade-done (0: it does not wait)",
        ge=0, le=1440,
    )  # fmt: skip


class KubeRay(StrictModel):
    """The KubeRay operator (RayCluster, RayJob, RayService), installed from its pinned helm chart; with
    Kueue, RayClusters are admitted through their tenant's queue (the ``kueue.x-k8s.io/queue-name``
    label)."""

    enabled: bool = live(False, "Install the KubeRay operator (helm chart kuberay-operator)")
    version: str = live(
        KUBERAY_DEFAULT_VERSION,
        "Chart release (the operator's release too); its archive is used only with a known sha256: the chart "
        "repository's published digest where gpuforge has it, else sources.artifact_sha256",
        pattern=CHART_VERSION,
    )
    namespace: str = rebuild("kuberay-system", "Namespace of the operator", pattern=NAMESPACE)


class Trainer(StrictModel):
    """Kubeflow Trainer v2 (TrainJob), the successor upstream recommends to the Training Operator v1
    (PyTorchJob; k8s_frameworks 'trainer-readme', 'trainer-migration'), installed from its pinned helm
    chart with the torch-distributed runtime; with Kueue, a TrainJob's pods are admitted together through
    their tenant's queue (gang admission)."""

    enabled: bool = live(False, "Install Kubeflow Trainer (helm chart kubeflow-trainer; needs Kubernetes 1.31+)")
    version: str = live(
        TRAINER_DEFAULT_VERSION,
        "Chart release; its archive is used only with its sha256 pinned in sources.artifact_sha256 "
        "(kubeflow-trainer-<version>.tgz: the OCI registry publishes none gpuforge can cite)",
        pattern=CHART_VERSION,
    )
    namespace: str = rebuild("kubeflow-system", "Namespace of the controller", pattern=NAMESPACE)


class Frameworks(StrictModel):
    """Distributed training and serving frameworks, installed from the first control plane after the GPU
    Operator and before the queue controller (whose integrations then find their CRDs)."""

    kuberay: KubeRay = live(default_factory=KubeRay, description="KubeRay operator")
    trainer: Trainer = live(default_factory=Trainer, description="Kubeflow Trainer v2")
