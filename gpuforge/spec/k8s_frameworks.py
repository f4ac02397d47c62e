"""Upstream facts of the cluster's training and serving frameworks (KubeRay, Kubeflow Trainer), the
Kueue resource flavors per node group and the GPU Operator's upgrade: one data table.

Every fact names where it came from (``SOURCES``: page or file, and the section that says it). The
renderers, the add-on deploy, the spec rules and the tests read these names; nothing about the
KubeRay or Trainer charts, Kueue's framework integrations or the GPU Operator's upgrade steps is
spelled anywhere else. Looked up 2026-11-26 (the snapshots' dates are in each citation).
"""

from __future__ import annotations

from gpuforge.spec.citation import Citation

KUBERAY_TAG_COMMIT = "59d663aeec13760646da3db9c1cf8cfe883e30b7"
TRAINER_TAG_COMMIT = "658725bdae5c7e3a0854d93ac6ff492e109a22ab"
KUEUE_TAG_COMMIT = "8eab68778fc1b52affe165fdf5af29d1e9b4f3cb"
NVIDIA_DOCS_COMMIT = "52dcb7b8d956784344e241df476de17094a4574c"
KUEUE_DOCS = "https://kueue.sigs.k8s.io/docs"
GPU_OPERATOR_DOCS = "https://docs.nvidia.com/datacenter/cloud-native/gpu-operator/latest"

SOURCES: dict[str, Citation] = {
    "kuberay-chart": Citation(
        f"ray-project/kuberay v1.7.0 (commit {KUBERAY_TAG_COMMIT}, 2026-08-19, the newest release tag) "
        "helm-chart/kuberay-operator/README.md, Chart.yaml, values.yaml",
        "https://github.com/ray-project/kuberay/tree/v1.7.0/helm-chart/kuberay-operator",
        "'helm repo add kuberay https://ray-project.github.io/kuberay-helm/'; 'Install both CRDs and KubeRay "
        "operator v1.7.0': 'helm install kuberay-operator kuberay/kuberay-operator --version 1.7.0'; Chart.yaml "
        "'name: kuberay-operator', 'version: 1.7.0'; values.yaml: image quay.io/kuberay/operator tag v1.7.0, "
        "'batchScheduler: enabled: false, name: \"\"' (volcano, yunikorn, kai-scheduler or scheduler-plugins: "
        "none is Kueue, which needs no scheduler of its own), 'metrics.serviceMonitor.enabled: false', "
        "'singleNamespaceInstall: false' (the operator watches every namespace)",
    ),
    "kuberay-helm-index": Citation(
        "ray-project/kuberay-helm branch gh-pages index.yaml (commit 4f704bab3f7e61f67e878ee415bd4964e294dfd7, "
        "generated 2025-07-16; the newest snapshot of the repository's index that could be read here)",
        "https://ray-project.github.io/kuberay-helm/index.yaml",
        "kuberay-operator entries 'version', 'digest' and 'urls' (https://github.com/ray-project/kuberay-helm/"
        "releases/download/kuberay-operator-<v>/kuberay-operator-<v>.tgz). helm writes 'digest' as the SHA256 "
        "of the chart archive (helm/helm pkg/repo/index.go, pkg/provenance/sign.go DigestFile: 'calculates a "
        "SHA256 hash ... This function can be used to generate a sum of any package archive file'). The index "
        "read here ends at 1.4.2: the digests of 1.5 to 1.7 are published by the live index, not by a "
        "snapshot gpuforge can cite",
    ),
    "kuberay-upgrade": Citation(
        "Ray documentation, KubeRay upgrade guide (ray-project/ray doc/source/cluster/kubernetes/user-guides/"
        "upgrade-guide.md, commit 09e9eb1d2d915af49c6dd60dfecc3dfec2c33a22)",
        "https://docs.ray.io/en/latest/cluster/kubernetes/user-guides/upgrade-guide.html",
        "'To upgrade the KubeRay version, follow these steps in order: 1. Upgrade the CRD manifest ... 2. Upgrade "
        "the kuberay-operator image'; 'This example uses kubectl because Helm doesn't support lifecycle "
        "management of CRDs'; 'helm upgrade kuberay-operator kuberay/kuberay-operator --version ...' ('This "
        "step doesn't upgrade the CRDs')",
    ),
    "kuberay-crd-size": Citation(
        "ray-project/kuberay pull request 268 (review of the Makefile's CRD install)",
        "https://github.com/ray-project/kuberay/pull/268",
        '\'use create and replace instead of apply due to The CustomResourceDefinition "rayclusters.ray.io" is '
        "invalid: metadata.annotations: Too long: must have at most 262144 bytes' (client-side apply keeps the "
        "whole object in an annotation; server-side apply, as Kueue's install uses it, keeps none)",
    ),
    "kuberay-sample": Citation(
        f"ray-project/kuberay v1.7.0 ray-operator/config/samples/ray-cluster.complete.yaml (commit "
        f"{KUBERAY_TAG_COMMIT})",
        "https://github.com/ray-project/kuberay/blob/v1.7.0/ray-operator/config/samples/ray-cluster.complete.yaml",
        "RayCluster ray.io/v1: 'rayVersion: \"2.52.0\"', head container 'image: rayproject/ray:2.52.0' with ports "
        "6379 gcs, 8265 dashboard, 10001 client, 'rayStartParams: dashboard-host: \"0.0.0.0\"'; workerGroupSpecs "
        "items replicas, minReplicas, maxReplicas, groupName, rayStartParams, template; 'For production use-cases, "
        "we recommend specifying integer CPU requests and limits. We also recommend setting requests equal to "
        "limits for both CPU and memory'",
    ),
    "ray-image-tags": Citation(
        "ray-project/ray docker/base-deps/README.md (the rayproject/ray image tags)",
        "https://github.com/ray-project/ray/blob/master/docker/base-deps/README.md",
        "'Images are tagged with the format {Ray version}[-{Python version}][-{Platform}]'; platform '-cuXX: "
        "These are based off of an NVIDIA CUDA image', '-gpu: Aliases to a specific -cuXX tagged image', 'no "
        "tag: Aliases to -cpu tagged images for ray'",
    ),
    "kueue-raycluster": Citation(
        f"Kueue v0.19.2 (commit {KUEUE_TAG_COMMIT}) site/content/en/docs/tasks/run/rayclusters.md",
        f"{KUEUE_DOCS}/tasks/run/rayclusters/",
        "'The target local queue should be specified in the metadata.labels section of the RayCluster "
        "configuration': 'kueue.x-k8s.io/queue-name: user-queue'; 'Kueue controls the spec.suspend field of the "
        "RayCluster'; 'a RayCluster will hold resource quotas while it exists'; 'the maximum number of "
        "spec.workerGroupSpecs is 17'; 'Make sure you are using Kueue v0.6.0 version or newer and KubeRay v1.1.0 "
        "or newer'",
    ),
    "kueue-integrations": Citation(
        f"Kueue v0.19.2 apis/config/v1beta2/configuration_types.go (commit {KUEUE_TAG_COMMIT}), type "
        "Integrations; Kueue Configuration reference",
        f"{KUEUE_DOCS}/reference/kueue-config.v1beta2/#config-kueue-x-k8s-io-v1beta2-Integrations",
        "'Frameworks []string': 'List of framework names to be enabled. Possible options: \"batch/job\", "
        '"kubeflow.org/mpijob", "ray.io/rayjob", "ray.io/rayservice", "ray.io/raycluster", '
        '"jobset.x-k8s.io/jobset", ... "kubeflow.org/pytorchjob", ... "trainer.kubeflow.org/trainjob", ...\' '
        "(YAML key integrations.frameworks); the release's own configuration lists ray.io/raycluster and "
        "trainer.kubeflow.org/trainjob among its defaults (k8s_day2 'kueue-config')",
    ),
    "trainer-readme": Citation(
        f"kubeflow/trainer README.md at v2.3.0 (commit {TRAINER_TAG_COMMIT}, 2026-08-06, the newest release tag; "
        "v1.9.4 of 2026-08-18 is the legacy branch's)",
        "https://github.com/kubeflow/trainer#kubeflow-training-operator-v1",
        "'Kubeflow Trainer v2.2 is officially released'; 'Kubeflow Trainer seamlessly integrates with ... Kueue'; "
        "'Kubeflow Trainer project is currently in alpha status, and APIs may change. If you are using Kubeflow "
        "Training Operator V1, please refer to this migration document'; 'Kubeflow Community will maintain the "
        "Training Operator V1 source code at the release-1.9 branch'",
    ),
    "trainer-install": Citation(
        f"kubeflow/trainer v2.3.0 docs/operator-guides/installation.md; charts/kubeflow-trainer/Chart.yaml and "
        f"values.yaml (commit {TRAINER_TAG_COMMIT})",
        "https://www.kubeflow.org/docs/components/trainer/operator-guides/installation/",
        "Prerequisites: 'Kubernetes >= 1.31'; 'helm install kubeflow-trainer oci://ghcr.io/kubeflow/charts/"
        "kubeflow-trainer --namespace kubeflow-system --create-namespace --version ${VERSION#v}'; 'The Trainer "
        "CRDs (TrainJob, TrainingRuntime, ClusterTrainingRuntime) are installed by the chart by default' (the "
        "chart's templates/crd/, so helm upgrade changes them too); '--set runtimes.torchDistributed.enabled=true'; "
        "Chart.yaml 'version: 2.3.0', dependency jobset 0.12.0 'condition: jobset.install'; values.yaml "
        "'jobset: install: true', 'runtimes: defaultEnabled: false', 'torchDistributed: enabled: false'",
    ),
    "trainer-migration": Citation(
        "kubeflow/trainer v2.3.0 docs/operator-guides/migration.md",
        "https://www.kubeflow.org/docs/components/trainer/operator-guides/migration/",
        "'Kubeflow Trainer v2 introduces new APIs that replace the older, framework-specific CRDs such as "
        "PyTorchJob, TFJob, and MPIJob'; 'Migrate PyTorchJob to TrainJob': apiVersion trainer.kubeflow.org/"
        "v1alpha1, kind TrainJob, spec.runtimeRef.name torch-distributed",
    ),
    "trainer-torch-runtime": Citation(
        "kubeflow/trainer v2.3.0 charts/kubeflow-trainer/files/runtimes/torch-distributed.yaml (blob "
        "30e323541490b6cf5519e5059aafcdb5373254d8)",
        "https://github.com/kubeflow/trainer/blob/v2.3.0/charts/kubeflow-trainer/files/runtimes/torch-distributed.yaml",
        "ClusterTrainingRuntime 'name: torch-distributed', 'trainer.kubeflow.org/framework: torch', mlPolicy "
        "torch, replicated job 'node' with container 'node', 'image: pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime'",
    ),
    "helm-oci": Citation(
        "Harbor: Working with OCI Helm Charts (goharbor.io/docs/2.13.0); kapicorp/kapitan pull request 834",
        "https://goharbor.io/docs/2.13.0/working-with-projects/working-with-oci/working-with-helm-oci-charts/",
        "'With the release of Helm 3.8.0, Helm is able to store and work with charts in container registries'; "
        "'helm pull oci://<harbor_address>/<project>/<chart_name> --version <version>'. kapitan 834: 'the --repo "
        "flag have to be omitted because it only works with http(s) chart repositories. Helm expects the "
        "fully-qualified URL to the chart instead as argument'",
    ),
    "kueue-trainjob": Citation(
        f"Kueue v0.19.2 site/content/en/docs/tasks/run/trainjobs.md (commit {KUEUE_TAG_COMMIT})",
        f"{KUEUE_DOCS}/tasks/run/trainjobs/",
        "'The minimum required Trainer version is v2.0.0'; 'Enable TrainJob integration in Kueue'; queue "
        "selection 'kueue.x-k8s.io/queue-name' in metadata.labels; 'Kueue will set suspend to true via webhook "
        "and unsuspend it when the TrainJob is admitted'; example TrainJob: 'runtimeRef: name: torch-distributed, "
        "kind: ClusterTrainingRuntime', 'trainer: numNodes: 2, resourcesPerNode: requests: ... nvidia.com/gpu'",
    ),
    "kueue-workload": Citation(
        f"Kueue v0.19.2 site/content/en/docs/concepts/workload.md (commit {KUEUE_TAG_COMMIT})",
        f"{KUEUE_DOCS}/concepts/workload/",
        "'It can be composed by one or multiple Pods that, loosely or tightly coupled, as a whole, complete a "
        "task. A workload is the unit of admission in Kueue'; 'Kueue uses the podSets resources requests to "
        "calculate the quota used by a Workload and decide if and when to admit a Workload' (a TrainJob's or "
        "RayCluster's pods are admitted together or not at all)",
    ),
    "kueue-flavors": Citation(
        f"Kueue v0.19.2 site/content/en/docs/concepts/resource_flavor.md and cluster_queue.md (commit "
        f"{KUEUE_TAG_COMMIT}); config/components/crd/bases/kueue.x-k8s.io_clusterqueues.yaml",
        f"{KUEUE_DOCS}/concepts/resource_flavor/",
        "'To associate a ResourceFlavor with a subset of nodes of your cluster, you can configure the "
        ".spec.nodeLabels field with matching node labels that uniquely identify the nodes'; on admission 'Kueue "
        "adds the ResourceFlavor labels to the .nodeSelector of the underlying Workload Pod templates'; "
        "cluster_queue.md: 'When a ResourceFlavor is tied to a node group ... all the resources associated to "
        "the nodes (such as cpu, memory and GPUs) should be assigned to the same flavor during admission. To "
        "tie two or more resources to the same set of flavors, list them in the same resource group'; 'Kueue "
        "evaluates the Flavors in a ClusterQueue in order'; the CRD's rule 'flavors must have the same number "
        "of resources as the coveredResources'",
    ),
    "gpu-operator-upgrade-crds": Citation(
        f"NVIDIA/cloud-native-docs gpu-operator/upgrade.rst (commit {NVIDIA_DOCS_COMMIT}, 2026-08-21), "
        "'Upgrading the NVIDIA GPU Operator'",
        f"{GPU_OPERATOR_DOCS}/upgrade.html",
        "'Because Helm does not support automatic upgrade of existing CRDs'; Option 1, Manually Upgrading CRDs: "
        "'kubectl apply -f' of deployments/gpu-operator/crds/nvidia.com_clusterpolicies.yaml, "
        "nvidia.com_nvidiadrivers.yaml, nvidia.com_gpuclusters.yaml, resource.nvidia.com_computedomains.yaml and "
        "resource.nvidia.com_computedomaincliques.yaml ('Apply both definitions before upgrading, including when "
        "ComputeDomain support is currently disabled'), and deployments/gpu-operator/charts/node-feature-"
        "discovery/crds/nfd-api-crds.yaml, each at the release tag; then 'helm upgrade gpu-operator "
        "nvidia/gpu-operator -n gpu-operator -f values-$RELEASE_TAG.yaml --version $RELEASE_TAG'. Option 2's "
        "hook 'does not upgrade the ComputeDomain custom resource definitions'. The chart archive carries the "
        "same files (helm package keeps crds/ and charts/<dependency>/crds/: NVIDIA/gpu-operator v26.7.0, "
        "commit 10ee5b3638b89e11e949412aafa5ba99279c3721, deployments/gpu-operator/)",
    ),
    "gpu-driver-upgrades": Citation(
        f"NVIDIA/cloud-native-docs gpu-operator/gpu-driver-upgrades.rst (commit {NVIDIA_DOCS_COMMIT}), 'GPU "
        "Driver Upgrades'; NVIDIA/gpu-operator v26.7.0 deployments/gpu-operator/values.yaml driver.upgradePolicy",
        f"{GPU_OPERATOR_DOCS}/gpu-driver-upgrades.html",
        "'NVIDIA recommends upgrading by using the upgrade controller and the controller is enabled by default'; "
        "cluster policy field spec.driver.upgradePolicy (chart value driver.upgradePolicy): 'autoUpgrade' "
        "('When set to false, the other policy fields are ignored'), 'maxParallelUpgrades' ('A value of 0 means "
        "that there is no limit'; default 1), 'maxUnavailable' (number or percentage, default 25%), "
        "'gpuPodDeletion' (force, timeoutSeconds 300, deleteEmptyDir), 'drain' ('enable: false' by default, "
        "'Enable drain only when gpuPodDeletion ... is insufficient', timeoutSeconds 300, force, podSelector, "
        "deleteEmptyDir); monitor: \"kubectl get node -l nvidia.com/gpu.present -ojsonpath='{range .items[*]}"
        '{.metadata.name}{"\\t"}{.metadata.labels.nvidia\\.com/gpu-driver-upgrade-state}{"\\n"}{end}\'"; \'The '
        "GPU driver upgrade is complete when the output shows upgrade-done'; 'If the upgrade fails for a "
        "particular node, the node is labelled with the upgrade-failed state'; to restart it: 'kubectl label "
        "node <node-name> nvidia.com/gpu-driver-upgrade-state=upgrade-required --overwrite'; 'The GPU Operator "
        "only manages the lifecycle of containerized drivers'",
    ),
    "gpu-operator-driver-pods": Citation(
        f"NVIDIA/cloud-native-docs gpu-operator/precompiled-drivers.rst, gpu-driver-upgrades.rst and "
        f"install-gpu-operator-air-gapped.rst (commit {NVIDIA_DOCS_COMMIT})",
        f"{GPU_OPERATOR_DOCS}/precompiled-drivers.html",
        "'kubectl get pods -l app=nvidia-driver-daemonset -n gpu-operator' (the driver daemon set's pods); "
        "install-gpu-operator-air-gapped.rst: 'docker pull nvcr.io/nvidia/driver:${recommended}-ubuntu22.04' (the "
        "driver image is tagged <driver version>-<os>)",
    ),
}

# --------------------------------------------------------------------------- KubeRay (kuberay-chart)

KUBERAY_DEFAULT_VERSION = "1.7.0"
KUBERAY_CHART = "kuberay-operator"
KUBERAY_RELEASE = "kuberay-operator"
KUBERAY_REPO = "https://ray-project.github.io/kuberay-helm/"
#: Where the index's ``urls`` point: ``<releases>/kuberay-operator-<v>/kuberay-operator-<v>.tgz`` (kuberay-helm-index).
KUBERAY_RELEASES = "https://github.com/ray-project/kuberay-helm/releases/download"
#: The operator's Deployment (values.yaml fullnameOverride: kuberay-operator).
KUBERAY_DEPLOYMENT = "kuberay-operator"
#: Where the chart archive keeps its CRDs (kuberay-upgrade: they are applied before helm upgrades).
KUBERAY_CRD_DIR = "kuberay-operator/crds"
#: The chart's digests as its repository's index publishes them (kuberay-helm-index): version -> sha256.
KUBERAY_CHART_SHA256: dict[str, str] = {
    "1.4.2": "4a36c3c08dd799d3384f50f3744183dd7c89cf4f1540ea93450acaacf557562b",
    "1.4.1": "1b69b9a816decc7147c9ab9bb9c48a3b1f30b5cea5c828c73221ef2fd121923d",
    "1.4.0": "97f811be5c3ec8791e93448b634082b621906158789d2f02dfb9be927b7ed869",
}
KUBERAY_INDEX_COMMIT = "4f704bab3f7e61f67e878ee415bd4964e294dfd7"
#: The Ray release the v1.7.0 samples run (kuberay-sample) and its images (ray-image-tags).
RAY_VERSION = "2.52.0"
RAY_IMAGE = f"rayproject/ray:{RAY_VERSION}"
RAY_GPU_IMAGE = f"rayproject/ray:{RAY_VERSION}-gpu"
RAY_API = "ray.io/v1"
RAY_HEAD_PORTS = (("gcs", 6379), ("dashboard", 8265), ("client", 10001))
#: Kueue's limit on a RayCluster's worker groups (kueue-raycluster).
KUEUE_MAX_RAY_WORKER_GROUPS = 17

# --------------------------------------------------------------------------- Kubeflow Trainer (trainer-install)

TRAINER_DEFAULT_VERSION = "2.3.0"
TRAINER_CHART = "kubeflow-trainer"
TRAINER_RELEASE = "kubeflow-trainer"
TRAINER_OCI = "oci://ghcr.io/kubeflow/charts/kubeflow-trainer"
TRAINER_DEPLOYMENT = "kubeflow-trainer-controller-manager"
#: 'Kubernetes >= 1.31' (trainer-install).
TRAINER_MIN_K8S_MINOR = 31
TRAINER_GROUP = "trainer.kubeflow.org"
TRAINER_API = f"{TRAINER_GROUP}/v1alpha1"
#: The ClusterTrainingRuntime the chart installs with runtimes.torchDistributed.enabled (trainer-torch-runtime).
TORCH_RUNTIME = "torch-distributed"
TORCH_IMAGE = "pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime"

# --------------------------------------------------------------------------- Kueue (kueue-integrations)

QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"
#: The Kueue integration each framework's objects are admitted through.
KUEUE_FRAMEWORKS = {"kuberay": "ray.io/raycluster", "trainer": "trainer.kubeflow.org/trainjob"}
#: The node label gpuforge sets on every Kubernetes node, selecting its group's ResourceFlavor (kueue-flavors).
NODE_GROUP_LABEL = "gpuforge.dev/node-group"

# --------------------------------------------------------------------------- GPU Operator upgrades

#: The chart archive's CRD folders, applied before helm upgrades (gpu-operator-upgrade-crds).
GPU_OPERATOR_CRD_DIRS = ("gpu-operator/crds", "gpu-operator/charts/node-feature-discovery/crds")
GPU_PRESENT_LABEL = "nvidia.com/gpu.present"
DRIVER_UPGRADE_STATE_LABEL = "nvidia.com/gpu-driver-upgrade-state"
UPGRADE_DONE = "upgrade-done"
UPGRADE_FAILED = "upgrade-failed"
#: The driver daemon set's pods (gpu-operator-driver-pods).
DRIVER_POD_SELECTOR = "app=nvidia-driver-daemonset"


def chart_file(chart: str, version: str) -> str:
    """The archive ``helm pull`` leaves for ``chart`` at ``version``: ``<chart>-<version>.tgz``."""
    return f"{chart}-{version}.tgz"


def upgrade_states_command(kubectl: str) -> str:
    """Each GPU node and its driver upgrade state, one ``<node>\\t<state>`` line each (gpu-driver-upgrades)."""
    label = DRIVER_UPGRADE_STATE_LABEL.replace(".", "\\.")
    path = '{range .items[*]}{.metadata.name}{"\\t"}{.metadata.labels.' + label + '}{"\\n"}{end}'
    return f"{kubectl} get node -l {GPU_PRESENT_LABEL} -ojsonpath='{path}'"


def retry_upgrade_command(node: str) -> str:
    """What NVIDIA's guide runs once a failed node's cause is fixed (gpu-driver-upgrades)."""
    return f"kubectl label node {node} {DRIVER_UPGRADE_STATE_LABEL}=upgrade-required --overwrite"
