"""Upstream facts of a Kubernetes cluster's life after day one: supported versions, upgrades, node
removal, certificates, etcd snapshots, the kube-vip API endpoint, interface pins, Kueue's own
configuration. One data table; every fact names where it came from (``SOURCES``).

The kubernetes deploy, the renderers, the orchestration and the tests read these names; nothing
about ``kubeadm upgrade``, ``kubeadm certs``, etcd snapshots or kube-vip is spelled anywhere else.
Looked up 2026-11-26 (the snapshots' dates are in each citation).
"""

from __future__ import annotations

from gpuforge.spec.citation import Citation

K8S_DOCS = "https://kubernetes.io/docs"

SOURCES: dict[str, Citation] = {
    "k8s-releases": Citation(
        "Kubernetes Releases (kubernetes.io/releases/<minor>/, the pages built from kubernetes/website "
        "data/releases/schedule.yaml)",
        "https://kubernetes.io/releases/",
        "1.33: End Of Life 2026-06-28; 1.34: End Of Life 2026-10-27; 1.35: latest 1.35.9 (2026-09-15), End Of "
        "Life 2027-02-28; 1.36: 1.36.4 released 2026-08-11, End Of Life 2027-06-28; 1.37: 1.37.0 released "
        "2026-08-26, End Of Life 2027-10-28. So on 2026-11-26 the supported minors are 1.35, 1.36 and 1.37",
    ),
    "gpu-operator-platforms": Citation(
        "NVIDIA GPU Operator: Platform Support (NVIDIA/cloud-native-docs gpu-operator/platform-support.rst, "
        "commit 52dcb7b8d956784344e241df476de17094a4574c, 2026-08-21; GPU Operator 26.7.x 'Supported')",
        "https://docs.nvidia.com/datacenter/cloud-native/gpu-operator/latest/platform-support.html",
        "Supported Operating Systems and Kubernetes Platforms, Bare Metal: Ubuntu 22.04/24.04/26.04 LTS and RHEL "
        "8/9/10 with Kubernetes '1.33---1.36'; footnote 1: 'The Kubernetes community only supports the last three "
        "minor releases'",
    ),
    "kubeadm-upgrade": Citation(
        "Upgrading kubeadm clusters (kubernetes/website content/en/docs/tasks/administer-cluster/kubeadm/"
        "kubeadm-upgrade.md); Upgrading Linux nodes (.../upgrading-linux-nodes.md, commit 69117dd1)",
        f"{K8S_DOCS}/tasks/administer-cluster/kubeadm/kubeadm-upgrade/",
        "'Skipping MINOR versions when upgrading is unsupported'; workflow: 'Upgrade a primary control plane "
        "node', 'Upgrade additional control plane nodes', 'Upgrade worker nodes'; 'The upgrade procedure on "
        "control plane nodes should be executed one node at a time'; first control plane: upgrade kubeadm "
        "('apt-mark unhold kubeadm && apt-get update && apt-get install -y kubeadm=<v>-* && apt-mark hold "
        "kubeadm'; 'yum install -y kubeadm-<v> --disableexcludes=kubernetes'), 'kubeadm upgrade plan', "
        "'kubeadm upgrade apply v<v>'; other control planes: 'kubeadm upgrade node' instead; then drain "
        "('kubectl drain <node> --ignore-daemonsets'), upgrade kubelet and kubectl the same way, 'systemctl "
        "daemon-reload', 'systemctl restart kubelet', 'kubectl uncordon <node>'; workers: kubeadm, 'kubeadm "
        "upgrade node', drain, kubelet and kubectl, restart, uncordon; 'kubeadm upgrade ... is idempotent'",
    ),
    "kubeadm-upgrade-apply-yes": Citation(
        "kubernetes/kubernetes cmd/kubeadm/app/cmd/upgrade/apply.go (kubeadm upgrade apply's flags)",
        f"{K8S_DOCS}/reference/setup-tools/kubeadm/generated/kubeadm_upgrade/kubeadm_upgrade_apply/",
        "'-y, --yes': 'Perform the upgrade and do not prompt for confirmation (non-interactive mode).'; "
        "'kubeadm upgrade plan [version] [flags]': 'To skip the internet check, pass in the optional [version] "
        "parameter'",
    ),
    "kubeadm-remove-node": Citation(
        "Creating a cluster with kubeadm, Clean up / Remove the node (content/en/docs/setup/production-environment/"
        "tools/kubeadm/create-cluster-kubeadm.md); kubeadm reset phases (kubeadm_reset_phase_remove-etcd-member)",
        f"{K8S_DOCS}/setup/production-environment/tools/kubeadm/create-cluster-kubeadm/#remove-the-node",
        "'kubectl drain <node name> --delete-emptydir-data --force --ignore-daemonsets'; 'Before removing the "
        "node, reset the state installed by kubeadm' ('kubeadm reset'); 'Now remove the node: kubectl delete node "
        "<node name>'. kubeadm reset phase remove-etcd-member: 'Remove a local etcd member for a control plane "
        "node'",
    ),
    "etcd-operate": Citation(
        "Operating etcd clusters for Kubernetes (content/en/docs/tasks/administer-cluster/configure-upgrade-etcd.md)",
        f"{K8S_DOCS}/tasks/administer-cluster/configure-upgrade-etcd/",
        "'Run etcd as a cluster of odd members'; replacing a member: 'etcdctl member list', 'etcdctl member remove "
        "<id>'; backup: 'ETCDCTL_API=3 etcdctl --endpoints=https://127.0.0.1:2379 --cacert=<trusted-ca-file> "
        "--cert=<cert-file> --key=<key-file> snapshot save <backup-file-location>'; restore: 'etcdutl --data-dir "
        "<data-dir-location> snapshot restore snapshot.db'; 'If any API servers are running in your cluster, you "
        "should not attempt to restore instances of etcd': 'stop all kube-apiserver instances', 'restore state in "
        "all etcd instances', 'restart all kube-apiserver instances'",
    ),
    "etcd-recovery": Citation(
        "etcd: Disaster recovery (etcd-io/website content/en/docs/v3.6/op-guide/recovery.md)",
        "https://etcd.io/docs/v3.6/op-guide/recovery/",
        "'To restore a cluster, all that is needed is a single snapshot \"db\" file'; 'all members should restore "
        "using the same snapshot'; 'etcdutl snapshot restore snapshot.db --name m1 --initial-cluster "
        "m1=http://host1:2380,m2=http://host2:2380,m3=http://host3:2380 --initial-cluster-token etcd-cluster-1 "
        "--initial-advertise-peer-urls http://host1:2380' on each member, then start etcd with the new data "
        "directories",
    ),
    "etcd-image": Citation(
        "kubernetes/kubernetes cluster/images/etcd/Dockerfile (commit 147581ef), the registry.k8s.io/etcd image "
        "kubeadm runs as the etcd static pod",
        "https://github.com/kubernetes/kubernetes/blob/master/cluster/images/etcd/Dockerfile",
        "'COPY etcd* etcdctl* /usr/local/bin/' ('etcdctl is used by etcd.manifest for livenessProbe'): the etcd "
        "container carries etcdctl and etcdutl of the cluster's own etcd version",
    ),
    "kubeadm-certs": Citation(
        "Certificate Management with kubeadm (content/en/docs/tasks/administer-cluster/kubeadm/kubeadm-certs.md)",
        f"{K8S_DOCS}/tasks/administer-cluster/kubeadm/kubeadm-certs/",
        "'Client certificates generated by kubeadm expire after 1 year'; 'kubeadm certs check-expiration'; "
        "'kubeadm renews all the certificates during control plane upgrade'; 'kubeadm certs renew all' ('If you "
        "are running cluster with a replicated control plane, this command needs to be executed on all the "
        "control-plane nodes'); 'After running the command you should restart the control plane Pods': 'temporarily "
        "remove its manifest file from /etc/kubernetes/manifests/ and wait for 20 seconds (see the "
        "fileCheckFrequency value in KubeletConfiguration struct)', then move it back",
    ),
    "kubeadm-certs-output": Citation(
        "kubernetes/kubernetes cmd/kubeadm/app/apis/output/v1alpha3/types.go; cmd/kubeadm/app/cmd/certs_test.go",
        "https://github.com/kubernetes/kubernetes/blob/master/cmd/kubeadm/app/apis/output/v1alpha3/types.go",
        "'kubeadm certs check-expiration -o=json' prints a CertificateExpirationInfo (output.kubeadm.k8s.io/"
        "v1alpha3): 'certificates' and 'certificateAuthorities', each {'name', 'expirationDate' ('in UTC following "
        "the RFC3339 format'), 'residualTime' (seconds), 'externallyManaged', 'caName', 'missing'}",
    ),
    "kube-vip-static": Citation(
        "kube-vip: Static Pods (kube-vip/website content/docs/installation/static.md, commit f5c870bf, "
        "2026-08-19); kube-vip/kube-vip v1.2.3 (commit 7ce55caf) pkg/kubevip/config_generator.go, "
        "config_envvar.go, cmd/kube-vip.go",
        "https://kube-vip.io/docs/installation/static/",
        "kubeadm: 'Generate a kube-vip manifest in the static Pods manifest directory', 'Run kubeadm init with the "
        "--control-plane-endpoint flag using the VIP address', after the joins 'Copy the generated kube-vip "
        "manifest to the remainder of the control planes'; ARP: 'kube-vip manifest pod --interface $INTERFACE "
        "--address $VIP --controlplane --arp --leaderElection'; 'Since Kubernetes v1.29 ... admin.conf isn't usable "
        "immediately ... using the super-admin.conf for initialization and then switching to admin.conf' "
        "(kube-vip issue 684). Generator: Pod kube-vip in kube-system, args [manager], env vip_arp, port, "
        "vip_nodename (fieldRef spec.nodeName), vip_interface, vip_subnet, cp_enable, cp_namespace, "
        "vip_leaderelection, vip_leasename, vip_leaseduration, vip_renewdeadline, vip_retryperiod, address; "
        "capabilities add NET_ADMIN, NET_RAW, drop ALL; hostNetwork; hostAliases kubernetes -> 127.0.0.1; hostPath "
        "k8sConfigPath (default /etc/kubernetes/admin.conf) mounted at /etc/kubernetes/admin.conf; flag defaults "
        "leaseName plndr-cp-lock, leaseDuration 15, leaseRenewDuration 10, leaseRetry 2, port 6443, image "
        "ghcr.io/kube-vip/kube-vip",
    ),
    "kubelet-node-ip": Citation(
        "kubelet command line reference (content/en/docs/reference/command-line-tools-reference/kubelet.md); "
        "kubeadm v1beta4 NodeRegistrationOptions (cmd/kubeadm/app/apis/kubeadm/v1beta4/types.go)",
        f"{K8S_DOCS}/reference/command-line-tools-reference/kubelet/",
        "'--node-ip': 'IP address (or comma-separated dual-stack IP addresses) of the node. If unset, kubelet will "
        "use the node's default IPv4 address'; v1beta4 'kubeletExtraArgs []Arg' ('The arg name must match the "
        "command line flag name except without leading dash(es)'), Arg {name, value}; v1beta3: a map",
    ),
    "flannel-iface": Citation(
        "flannel-io/flannel Documentation/configuration.md and Documentation/kube-flannel.yml at v0.26.1 "
        "(commit 3c5afe72) and v0.28.9 (commit 5cd0d526, the same lines)",
        "https://github.com/flannel-io/flannel/blob/v0.26.1/Documentation/configuration.md",
        '\'--iface="": interface to use (IP or name) for inter-host communication. Defaults to the interface for '
        "the default route on the machine'; the DaemonSet's flanneld args: '- --ip-masq', '- --kube-subnet-mgr'",
    ),
    "kueue-config": Citation(
        "kubernetes-sigs/kueue v0.19.2 (commit 8eab6877) config/components/manager/controller_manager_config.yaml, "
        "apis/config/v1beta2/configuration_types.go and defaults.go, pkg/controller/constants/constants.go",
        "https://kueue.sigs.k8s.io/docs/reference/kueue-config.v1beta2/",
        "'manageJobsWithoutQueueName': 'If set to true, then those jobs will be suspended and never started unless "
        "they are assigned a queue and eventually admitted ... Defaults to false'; 'managedJobsNamespaceSelector' "
        "(default: kubernetes.io/metadata.name NotIn [kube-system, <kueue namespace>]); 'DefaultLocalQueueName "
        '... "default"\' is set on a job without the queue-name label in a namespace that has a LocalQueue '
        "'default'; the release's ConfigMap kueue-manager-config, key controller_manager_config.yaml",
    ),
}

# --------------------------------------------------------------------------- versions (k8s-releases)

#: End of life of each minor (k8s-releases), the last day it gets patches.
END_OF_LIFE: dict[int, str] = {33: "2026-06-28", 34: "2026-10-27", 35: "2027-02-28", 36: "2027-06-28",
                               37: "2027-10-28"}  # fmt: skip
#: The Kubernetes minors the GPU Operator 26.7 is validated with (gpu-operator-platforms).
GPU_OPERATOR_MINORS = (33, 36)
#: gpuforge's default: the newest patch (on 2026-11-26) of the newest minor in both the supported
#: minors and the GPU Operator's validated range.
DEFAULT_VERSION = "1.36.4"


def version_tuple(version: str) -> tuple[int, int, int]:
    """``1.36.4`` -> (1, 36, 4)."""
    major, minor, patch = (int(x) for x in version.lstrip("v").split(".")[:3])
    return major, minor, patch


# --------------------------------------------------------------------------- upgrades (kubeadm-upgrade)


def upgrade_plan_command(version: str) -> str:
    """The check before the first control plane upgrades (kubeadm-upgrade)."""
    return f"kubeadm upgrade plan v{version}"


def upgrade_apply_command(version: str) -> str:
    """The first control plane's upgrade (kubeadm-upgrade, kubeadm-upgrade-apply-yes)."""
    return f"kubeadm upgrade apply v{version} --yes"


#: Every other node's upgrade, control plane or worker (kubeadm-upgrade).
UPGRADE_NODE_COMMAND = "kubeadm upgrade node"
#: After the kubelet package changed (kubeadm-upgrade).
KUBELET_RESTART = "systemctl daemon-reload && systemctl restart kubelet"

# --------------------------------------------------------------------------- node removal


def remove_drain_args(timeout_s: int) -> list[str]:
    """``kubectl drain`` arguments of a node leaving the cluster (kubeadm-remove-node), bounded."""
    return ["--delete-emptydir-data", "--force", "--ignore-daemonsets", f"--timeout={max(1, timeout_s)}s"]


RESET_COMMAND = "kubeadm reset -f"

# --------------------------------------------------------------------------- etcd (etcd-operate, etcd-image)

ETCD_MANIFEST = "/etc/kubernetes/manifests/etcd.yaml"
ETCD_ENDPOINT = "https://127.0.0.1:2379"
ETCD_PKI = "/etc/kubernetes/pki/etcd"
#: The client the snapshot uses: kubeadm's etcd health-check client certificate (etcd/ca signs it).
ETCD_CLIENT_FLAGS = (
    f"--endpoints={ETCD_ENDPOINT} --cacert={ETCD_PKI}/ca.crt "
    f"--cert={ETCD_PKI}/healthcheck-client.crt --key={ETCD_PKI}/healthcheck-client.key"
)
#: kubeadm's etcd data directory (mounted into the etcd container at the same path).
ETCD_DATA_DIR = "/var/lib/etcd"
STATIC_POD_DIR = "/etc/kubernetes/manifests"
#: The control plane's static pods, restarted one at a time after a renewal (kubeadm-certs).
CONTROL_PLANE_PODS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")
#: kubelet's fileCheckFrequency default (kubeadm-certs: 'wait for 20 seconds').
FILE_CHECK_S = 20

# --------------------------------------------------------------------------- kube-vip (kube-vip-static)

KUBE_VIP_IMAGE = "ghcr.io/kube-vip/kube-vip"
KUBE_VIP_DEFAULT_VERSION = "v1.2.3"
KUBE_VIP_MANIFEST = f"{STATIC_POD_DIR}/kube-vip.yaml"
KUBE_VIP_KUBECONFIG = "/etc/kubernetes/admin.conf"
#: What the first control plane's kube-vip uses until ``kubeadm init`` finished (kubeadm >= 1.29).
KUBE_VIP_INIT_KUBECONFIG = "/etc/kubernetes/super-admin.conf"
SUPER_ADMIN_SINCE = 29
#: Every environment variable kube-vip v1.2.3 reads that gpuforge sets (config_envvar.go).
KUBE_VIP_ENV = frozenset({
    "vip_arp", "port", "vip_nodename", "vip_interface", "vip_subnet", "cp_enable", "cp_namespace",
    "vip_leaderelection", "vip_leasename", "vip_leaseduration", "vip_renewdeadline", "vip_retryperiod", "address",
})  # fmt: skip
KUBE_VIP_LEASE = ("plndr-cp-lock", 15, 10, 2)  # name, duration, renew deadline, retry period (flag defaults)

# --------------------------------------------------------------------------- Kueue (kueue-config)

KUEUE_NAMESPACE = "kueue-system"
KUEUE_CONFIGMAP = ("kueue-manager-config", "controller_manager_config.yaml")
KUEUE_DEPLOYMENT = "kueue-controller-manager"
#: The Configuration each Kueue release ships in its ConfigMap (kueue-config: the release's
#: controller_manager_config.yaml without its comments). gpuforge changes a Kueue's configuration
#: only for a release listed here, so that nothing else of it changes.
KUEUE_DEFAULT_CONFIG: dict[str, dict[str, object]] = {
    "v0.19.2": {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "health": {"healthProbeBindAddress": ":8081"},
        "metrics": {"bindAddress": ":8443"},
        "webhook": {"port": 9443},
        "leaderElection": {"leaderElect": True, "resourceName": "c1f6bfd2.kueue.x-k8s.io"},
        "controller": {
            "groupKindConcurrency": {
                "Job.batch": 5,
                "Pod": 5,
                "Workload.kueue.x-k8s.io": 10,
                "LocalQueue.kueue.x-k8s.io": 5,
                "Cohort.kueue.x-k8s.io": 1,
                "ClusterQueue.kueue.x-k8s.io": 5,
                "ResourceFlavor.kueue.x-k8s.io": 1,
            }
        },
        "clientConnection": {"qps": 300, "burst": 500},
        "integrations": {
            "frameworks": [
                "batch/job",
                "kubeflow.org/mpijob",
                "ray.io/rayjob",
                "ray.io/raycluster",
                "ray.io/rayservice",
                "jobset.x-k8s.io/jobset",
                "workload.codeflare.dev/appwrapper",
                "trainer.kubeflow.org/trainjob",
                "pod",
                "deployment",
                "statefulset",
                "leaderworkerset.x-k8s.io/leaderworkerset",
            ]
        },
    }
}
