"""Upstream facts of the Kubernetes path (packages, kubeadm, bootstrap tokens): one data table.

Every fact names where it came from (``SOURCES``: page or file, and section). The kubernetes
deploy, the renderers, the spec rules and the tests all read these names; nothing about
pkgs.k8s.io or kubeadm is spelled anywhere else.

Pages are the Kubernetes documentation (repository kubernetes/website, ``content/en/docs/...``)
and kubeadm's API types (repository kubernetes/kubernetes, ``cmd/kubeadm/app/apis/kubeadm/``).
"""

from __future__ import annotations

from gpuforge.spec.citation import Citation

K8S_DOCS = "https://kubernetes.io/docs"

SOURCES: dict[str, Citation] = {
    "install-kubeadm": Citation(
        "Installing kubeadm (kubernetes/website content/en/docs/setup/production-environment/tools/kubeadm/"
        "install-kubeadm.md)",
        f"{K8S_DOCS}/setup/production-environment/tools/kubeadm/install-kubeadm/",
        "Installing kubeadm, kubelet and kubectl: Debian-based: 'curl -fsSL https://pkgs.k8s.io/core:/stable:/"
        "<minor>/deb/Release.key | gpg --dearmor -o /etc/apt/keyrings/kubernetes-apt-keyring.gpg'; "
        '"deb [signed-by=/etc/apt/keyrings/kubernetes-apt-keyring.gpg] '
        'https://pkgs.k8s.io/core:/stable:/<minor>/deb/ /"; '
        "'apt-get install -y kubelet kubeadm kubectl'; 'apt-mark hold kubelet kubeadm kubectl'. Red Hat-based: "
        "repo 'baseurl=https://pkgs.k8s.io/core:/stable:/<minor>/rpm/', 'gpgcheck=1', "
        "'gpgkey=.../rpm/repodata/repomd.xml.key', 'exclude=kubelet kubeadm kubectl cri-tools kubernetes-cni'; "
        "'yum install -y kubelet kubeadm kubectl --disableexcludes=kubernetes'; 'systemctl enable --now kubelet'. "
        "'The same signing key is used for all repositories' (install-kubectl-linux.md, same tabs)",
    ),
    "pkgs-k8s-io": Citation(
        "pkgs.k8s.io: Introducing Kubernetes Community-Owned Package Repositories (kubernetes.io blog, 2023-08-15)",
        "https://kubernetes.io/blog/2023/08/15/pkgs-k8s-io-introduction/",
        "'There's a dedicated package repository for each Kubernetes minor version'; 'anything before v1.24.0 "
        "will only be available in the Google-hosted repository' (which 'went away on March 4, 2024')",
    ),
    "pkgs-k8s-io-key": Citation(
        "kubernetes/kubernetes issue 128609 'K8S <= 1.27.x apt gpg key expired'; "
        "rpm-software-management/distribution-gpg-keys keys/kubernetes/repomd.xml.key "
        "(commit 65c3eae56c18c09e3033ea71235c86f49e9fd9c7)",
        "https://github.com/kubernetes/kubernetes/issues/128609",
        "'curl -fsSL https://pkgs.k8s.io/core:/stable:/v1.27/deb/Release.key > release.key; gpg release.key': "
        "'pub rsa2048 2022-08-25 [SC] ... DE15B14486CD377B9E876E1A234654DA9A296436 uid isv:kubernetes OBS "
        "Project <isv:kubernetes@build.opensuse.org>', the same for v1.26; the rpm repositories' repomd.xml.key "
        "is that key too (distribution-gpg-keys, 'Add the key for pkgs.k8s.io'); kubernetes/release issue 3818: "
        "the newer minors' Release.key verifies the older repositories (one key, renewed expiry)",
    ),
    "kubeadm-upgrade": Citation(
        "Upgrading kubeadm clusters (content/en/docs/tasks/administer-cluster/kubeadm/kubeadm-upgrade.md)",
        f"{K8S_DOCS}/tasks/administer-cluster/kubeadm/kubeadm-upgrade/",
        "version spelling: \"apt-get install -y kubeadm='<minor>.x-*'\" and "
        "\"yum install -y kubeadm-'<minor>.x-*' --disableexcludes=kubernetes\"",
    ),
    "kubeadm-config-v1beta4": Citation(
        "kubeadm Configuration (v1beta4); kubernetes/kubernetes cmd/kubeadm/app/apis/kubeadm/v1beta4/types.go",
        f"{K8S_DOCS}/reference/config-api/kubeadm-config.v1beta4/",
        "InitConfiguration (nodeRegistration.name/criSocket, localAPIEndpoint.advertiseAddress/bindPort), "
        "ClusterConfiguration (kubernetesVersion, clusterName, controlPlaneEndpoint, networking.podSubnet/"
        "serviceSubnet), JoinConfiguration (discovery.bootstrapToken.apiServerEndpoint/token/caCertHashes, "
        "controlPlane.localAPIEndpoint); KubeletConfiguration kubelet.config.k8s.io/v1beta1 cgroupDriver. "
        "v1beta3's page: 'DEPRECATED: v1beta3 is deprecated in favor of v1beta4' (v1beta4 from kubeadm 1.31)",
    ),
    "kubeadm-certs": Citation(
        "Certificate Management with kubeadm (content/en/docs/tasks/administer-cluster/kubeadm/kubeadm-certs.md)",
        f"{K8S_DOCS}/tasks/administer-cluster/kubeadm/kubeadm-certs/",
        "Custom certificates: 'if a given certificate and private key pair both exist before running kubeadm "
        "init, kubeadm does not overwrite them' (in /etc/kubernetes/pki)",
    ),
    "kubeadm-ha": Citation(
        "Creating Highly Available Clusters with kubeadm (content/en/docs/setup/production-environment/tools/"
        "kubeadm/high-availability.md)",
        f"{K8S_DOCS}/setup/production-environment/tools/kubeadm/high-availability/",
        "Manual certificate distribution: /etc/kubernetes/pki/ca.crt, ca.key, sa.key, sa.pub, front-proxy-ca.crt, "
        "front-proxy-ca.key, etcd/ca.crt, etcd/ca.key copied to every control plane node before 'kubeadm join "
        "--control-plane'",
    ),
    "kubeadm-join": Citation(
        "kubeadm join (content/en/docs/reference/setup-tools/kubeadm/kubeadm-join.md)",
        f"{K8S_DOCS}/reference/setup-tools/kubeadm/kubeadm-join/",
        "Token-based discovery with CA pinning: '--discovery-token-ca-cert-hash sha256:<hex>', the hash of the "
        "CA's Subject Public Key Info (SPKI) object ('openssl x509 -pubkey -in /etc/kubernetes/pki/ca.crt | "
        "openssl rsa -pubin -outform der | openssl dgst -sha256 -hex')",
    ),
    "bootstrap-tokens": Citation(
        "Authenticating with Bootstrap Tokens (content/en/docs/reference/access-authn-authz/bootstrap-tokens.md)",
        f"{K8S_DOCS}/reference/access-authn-authz/bootstrap-tokens/",
        "Token format '[a-z0-9]{6}.[a-z0-9]{16}'; Bootstrap Token Secret Format: Secret 'bootstrap-token-<token id>' "
        "in kube-system, type 'bootstrap.kubernetes.io/token', keys token-id, token-secret, expiration (RFC3339), "
        "usage-bootstrap-authentication, usage-bootstrap-signing, auth-extra-groups; kubeadm's group "
        "'system:bootstrappers:kubeadm:default-node-token'",
    ),
    "kubeadm-init": Citation(
        "kubeadm init (content/en/docs/reference/setup-tools/kubeadm/kubeadm-init.md)",
        f"{K8S_DOCS}/reference/setup-tools/kubeadm/kubeadm-init/",
        "'--config' file with InitConfiguration/ClusterConfiguration/KubeletConfiguration; "
        "'--skip-token-print: Skip printing of the default bootstrap token generated by kubeadm init'; "
        "admin kubeconfig /etc/kubernetes/admin.conf",
    ),
    "safely-drain-node": Citation(
        "Safely Drain a Node (content/en/docs/tasks/administer-cluster/safely-drain-node.md)",
        f"{K8S_DOCS}/tasks/administer-cluster/safely-drain-node/",
        "'kubectl drain --ignore-daemonsets <node name>'; drain uses the Eviction API, which 'respects "
        "PodDisruptionBudgets'; 'kubectl uncordon <node name>' afterwards",
    ),
    "flannel": Citation(
        "flannel-io/flannel README.md",
        "https://github.com/flannel-io/flannel#deploying-flannel-manually",
        "Deploying flannel manually: 'kubectl apply -f https://github.com/flannel-io/flannel/releases/latest/"
        "download/kube-flannel.yml'; 'If you use custom podCIDR (not 10.244.0.0/16) you first need to download "
        'the above manifest and modify the network to match your one\' (net-conf.json "Network")',
    ),
    "calico": Citation(
        "Calico: Install Calico networking and network policy for on-premises deployments",
        "https://docs.tigera.io/calico/latest/getting-started/kubernetes/self-managed-onprem/onpremises",
        "Manifest: 'curl https://raw.githubusercontent.com/projectcalico/calico/<version>/manifests/calico.yaml "
        "-O'; with kubeadm 'Calico will automatically detect the CIDR based on the running configuration'",
    ),
    "helm-install": Citation(
        "Installing Helm (helm.sh/docs/intro/install)",
        "https://helm.sh/docs/intro/install/",
        "From the Binary Releases: download helm-<version>-linux-amd64.tar.gz (get.helm.sh, linked from the GitHub "
        "releases), 'tar -zxvf ...', 'mv linux-amd64/helm /usr/local/bin/helm'",
    ),
    "helm-history": Citation(
        "helm history (helm.sh/docs/helm/helm_history); helm/helm v3.16.3 cmd/helm/history.go and v4.2.4 "
        "pkg/cmd/history.go (the same json fields)",
        "https://helm.sh/docs/helm/helm_history/",
        "'History prints historical revisions for a given release'; '--max int maximum number of revision to "
        "include in history'; '-o, --output format ... Allowed values: table, json, yaml'. history.go: the "
        "newest --max revisions, each 'releaseInfo' with json fields revision (int), updated, status, chart, "
        "app_version, description, encoded in one line (output.EncodeJSON); a release that does not exist "
        "fails with driver.ErrReleaseNotFound 'release: not found'. helm's own 'upgrade --install' decides "
        "install vs upgrade with the same History query (cmd/helm/upgrade.go: histClient.Max = 1)",
    ),
    "helm-release-not-found": Citation(
        "helm/helm v3.16.3 and v4.2.4 pkg/storage/driver/driver.go",
        "https://github.com/helm/helm/blob/v3.16.3/pkg/storage/driver/driver.go",
        "'ErrReleaseNotFound indicates that a release is not found.' ErrReleaseNotFound = "
        "errors.New(\"release: not found\"): the error 'helm history' of a release that does not exist fails "
        "with (helm-history); gpuforge looks for these words in the last line of helm's failing output",
    ),
    "helm-status": Citation(
        "helm status (helm.sh/docs/helm/helm_status); helm/helm v3.16.3 pkg/release/status.go, v4.2.4 "
        "pkg/release/common/status.go (the same states)",
        "https://helm.sh/docs/helm/helm_status/",
        "'state of the release (can be: unknown, deployed, uninstalled, superseded, failed, uninstalling, "
        "pending-install, pending-upgrade or pending-rollback)'; 'revision of the release'. 'helm status -o json' "
        "prints the whole release (chart templates, values, manifest): gpuforge reads 'helm history --max 1' "
        "instead, which carries the same revision and status",
    ),
    "gpu-operator-install": Citation(
        "NVIDIA GPU Operator: Install NVIDIA GPU Operator",
        "https://docs.nvidia.com/datacenter/cloud-native/gpu-operator/latest/install-gpu-operator.html",
        "'helm repo add nvidia https://helm.ngc.nvidia.com/nvidia'; 'helm install --wait --generate-name "
        "-n gpu-operator --create-namespace nvidia/gpu-operator --version=<v>' (gpuforge: helm upgrade --install "
        "with a fixed release name and --repo, so a re-run upgrades in place)",
    ),
    "gpu-operator-unprivileged": Citation(
        "NVIDIA GPU Operator: Security Considerations (NVIDIA/cloud-native-docs gpu-operator/"
        "security-considerations.rst)",
        "https://docs.nvidia.com/datacenter/cloud-native/gpu-operator/latest/security-considerations.html",
        "Preventing Unprivileged Access to GPUs: a default toolkit and device plugin give unprivileged containers "
        "GPUs when 'the container sets NVIDIA_VISIBLE_DEVICES'; 'The toolkit ignores NVIDIA_VISIBLE_DEVICES', "
        "'The plugin produces a list of GPU devices as volume mounts ... and the toolkit accepts this list "
        "exclusively'; values: toolkit.env ACCEPT_NVIDIA_VISIBLE_DEVICES_ENVVAR_WHEN_UNPRIVILEGED 'false', "
        "ACCEPT_NVIDIA_VISIBLE_DEVICES_AS_VOLUME_MOUNTS 'true'; devicePlugin.env DEVICE_LIST_STRATEGY="
        "volume-mounts (both 'env: []' in the chart's values.yaml)",
    ),
    "device-plugin-list-strategy": Citation(
        "NVIDIA/k8s-device-plugin README.md",
        "https://github.com/NVIDIA/k8s-device-plugin#as-command-line-flags-or-envvars",
        "DEVICE_LIST_STRATEGY: '[envvar | volume-mounts | cdi-annotations | cdi-cri ] (default 'envvar')'; "
        "'volume-mounts: the list of devices is passed as a set of volume mounts instead of as an environment "
        "variable to instruct the NVIDIA Container Runtime to inject the devices' (helm value deviceListStrategy)",
    ),
    "ctk-config": Citation(
        "NVIDIA/nvidia-container-toolkit cmd/nvidia-ctk/config/config.go, internal/config/config.go, "
        "internal/config/toml_test.go",
        "https://github.com/NVIDIA/nvidia-container-toolkit/tree/main/cmd/nvidia-ctk/config",
        "'nvidia-ctk config': --config-file (default /etc/nvidia-container-runtime/config.toml), '--set' 'Set a "
        "config value using the pattern key=value ... can be specified multiple times', '--in-place' 'Modify the "
        "config file in-place'; top-level keys 'accept-nvidia-visible-devices-envvar-when-unprivileged' and "
        "'accept-nvidia-visible-devices-as-volume-mounts' (bool), commented out in the default file "
        "('#...-as-volume-mounts = false', '#...-envvar-when-unprivileged = true'). The operator's toolkit "
        "installer reads the same options from ACCEPT_NVIDIA_VISIBLE_DEVICES_ENVVAR_WHEN_UNPRIVILEGED / "
        "ACCEPT_NVIDIA_VISIBLE_DEVICES_AS_VOLUME_MOUNTS (gpu-operator-unprivileged). Bottlerocket agrees: "
        "settings.kubelet-device-plugins.nvidia.device-list-strategy 'Default: volume-mounts' (bottlerocket.dev)",
    ),
    "kueue-install": Citation(
        "Kueue: Installation (kueue.sigs.k8s.io/docs/installation)",
        "https://kueue.sigs.k8s.io/docs/installation/",
        "Install a released version: 'kubectl apply --server-side -f https://github.com/kubernetes-sigs/kueue/"
        "releases/download/<version>/manifests.yaml'; 'kubectl wait deploy/kueue-controller-manager "
        "-nkueue-system --for=condition=available --timeout=5m'",
    ),
    "volcano-releases": Citation(
        "volcano-sh/volcano release tags (git snapshot of 2026-08-20, HEAD ed72c7c8)",
        "https://github.com/volcano-sh/volcano/releases/tag/v1.15.1",
        "newest release tag v1.15.1 (commit 0a56ed331897f5455916a44d3075671376d731d6, 2026-07-30; v1.16.0 is at "
        "alpha.1); there is no v0.19.2 tag: Kueue's numbering is not Volcano's",
    ),
    "volcano-install": Citation(
        "volcano-sh/volcano README.md",
        "https://github.com/volcano-sh/volcano#install-with-yaml-files",
        "Install with YAML files: 'kubectl apply -f https://raw.githubusercontent.com/volcano-sh/volcano/<ref>/"
        "installer/volcano-development.yaml' (deployments volcano-scheduler, volcano-controllers, "
        "volcano-admission in volcano-system)",
    ),
}

# --------------------------------------------------------------------------- packages (install-kubeadm)

#: pkgs.k8s.io, one repository per minor: ``{base}/core:/stable:/v<minor>/{deb|rpm}/``.
PKGS_K8S_IO = "https://pkgs.k8s.io"
#: The repository path below the base (a site mirror of pkgs.k8s.io keeps the same layout).
REPO_PATH = "core:/stable:/v{minor}/{fmt}"
#: Signing key beside each repository (armored): deb ``Release.key``, rpm ``repodata/repomd.xml.key``.
DEB_KEY_FILE = "Release.key"
RPM_KEY_FILE = "repodata/repomd.xml.key"
#: The primary key fingerprint of that key, for every minor and both formats (pkgs-k8s-io-key).
KEY_FINGERPRINT = "DE15B14486CD377B9E876E1A234654DA9A296436"
#: Installed on every Kubernetes node (install-kubeadm installs all three everywhere).
PACKAGES: tuple[str, ...] = ("kubelet", "kubeadm", "kubectl")
#: Held at the version (apt-mark hold) / excluded from dnf updates unless named.
HELD: tuple[str, ...] = PACKAGES
RPM_EXCLUDE: tuple[str, ...] = ("kubelet", "kubeadm", "kubectl", "cri-tools", "kubernetes-cni")
#: The first minor pkgs.k8s.io publishes (the Google-hosted repositories are gone).
FIRST_MINOR = 24

# --------------------------------------------------------------------------- kubeadm

#: kubeadm's config API: v1beta4 from kubeadm 1.31, v1beta3 before (1.22 to 1.30).
KUBEADM_V1BETA4_SINCE = 31
KUBELET_CONFIG_API = "kubelet.config.k8s.io/v1beta1"
CRI_SOCKET_CONTAINERD = "unix:///run/containerd/containerd.sock"
API_SERVER_PORT = 6443
ADMIN_CONF = "/etc/kubernetes/admin.conf"
#: Written by kubeadm init/join on every node of the cluster (non-secret: the kubelet's config).
KUBELET_CONFIG = "/var/lib/kubelet/config.yaml"
PKI_DIR = "/etc/kubernetes/pki"
#: The shared keys every control plane needs (kubeadm-ha: manual certificate distribution).
#: (name under PKI_DIR, kind): ``ca`` is a CA certificate + key, ``sa`` the service-account key pair.
SHARED_PKI: tuple[tuple[str, str], ...] = (("ca", "ca"), ("front-proxy-ca", "ca"), ("etcd/ca", "ca"), ("sa", "sa"))
#: Bootstrap tokens: ``<6>.<16>`` of [a-z0-9], the Secret in kube-system, kubeadm's node group.
TOKEN_ID_LEN = 6
TOKEN_SECRET_LEN = 16
TOKEN_ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789"
TOKEN_SECRET_TYPE = "bootstrap.kubernetes.io/token"
TOKEN_GROUP = "system:bootstrappers:kubeadm:default-node-token"
#: How long a join token gpuforge creates stays valid.
TOKEN_TTL_MINUTES = 30


def minor_of(version: str) -> int:
    """``1.31.4`` -> 31."""
    return int(version.split(".")[1])


def kubeadm_api_version(version: str) -> str:
    """The kubeadm config apiVersion kubeadm ``version`` reads (kubeadm-config-v1beta4)."""
    return "kubeadm.k8s.io/v1beta4" if minor_of(version) >= KUBEADM_V1BETA4_SINCE else "kubeadm.k8s.io/v1beta3"


def repo_path(version: str, deb: bool) -> str:
    """``core:/stable:/v1.31/deb`` for 1.31.x (install-kubeadm)."""
    major, minor = version.split(".")[:2]
    return REPO_PATH.format(minor=f"{major}.{minor}", fmt="deb" if deb else "rpm")


def deb_version_glob(version: str) -> str:
    """apt's spelling of any package revision of ``version`` (kubeadm-upgrade): ``1.31.4-*``."""
    return f"{version}-*"


def rpm_package_spec(name: str, version: str) -> str:
    """dnf's spelling of ``name`` at ``version`` (kubeadm-upgrade): ``kubeadm-1.31.4``."""
    return f"{name}-{version}"


# --------------------------------------------------------------------------- cluster add-ons

FLANNEL_DEFAULT_NETWORK = "10.244.0.0/16"
#: The newest releases in the cited snapshots (flannel 2026-08-14, calico 2026-08-22); calico 3.32 is tested
#: with Kubernetes 1.34-1.36 (support_windows); flannel publishes no Kubernetes range.
CNI_DEFAULT_VERSIONS = {"flannel": "v0.28.9", "calico": "v3.32.1"}


def cni_manifest(plugin: str, version: str) -> tuple[str, str]:
    """(artifact file name, upstream URL) of a CNI plugin's manifest (flannel, calico).

    flannel: the manifest its release commit puts in the repository at the tag, not the release
    asset kustomize builds from it at release time, of which no checksum is published
    (``artifact_digests.SOURCES['flannel-manifest']``): the file at the tag has a sha256 anyone can
    recompute from the repository.
    """
    if plugin == "flannel":
        url = f"https://raw.githubusercontent.com/flannel-io/flannel/{version}/Documentation/kube-flannel.yml"
        return f"kube-flannel-{version}.yml", url
    url = f"https://raw.githubusercontent.com/projectcalico/calico/{version}/manifests/calico.yaml"
    return f"calico-{version}.yaml", url


def helm_tarball(version: str, go_arch: str = "amd64") -> tuple[str, str]:
    """(file name, URL) of the helm release for ``linux-<go_arch>`` (helm-install; the platform
    table's Go architecture names, ``amd64`` / ``arm64``)."""
    name = f"helm-v{version.lstrip('v')}-linux-{go_arch}.tar.gz"
    return name, f"https://get.helm.sh/{name}"


#: A helm release in this state is installed as its revision says (helm-status); any other state
#: (failed, pending-*, uninstalled, ...) is repaired by running ``helm upgrade --install`` again.
HELM_RELEASE_DEPLOYED = "deployed"
#: ``sed -n`` script that prints the revision of ``helm history --max 1 -o json`` output
#: (helm-history: ``[{"revision":<n>,...}]`` on one line); prints nothing for any other output.
HELM_HISTORY_REVISION_SED = r's/^\[{"revision":\([0-9][0-9]*\)[,}].*/\1/p'


def helm_history_latest_args(release: str, namespace: str) -> list[str]:
    """helm's arguments for the newest revision of ``release`` as JSON (helm-history)."""
    return ["history", release, "--namespace", namespace, "--max", "1", "-o", "json"]


GPU_OPERATOR_REPO = "https://helm.ngc.nvidia.com/nvidia"
GPU_OPERATOR_CHART_NAME = "gpu-operator"


def gpu_operator_chart_file(version: str) -> str:
    """The chart archive an offline bundle carries (``helm pull`` names it ``<chart>-<version>.tgz``)."""
    return f"{GPU_OPERATOR_CHART_NAME}-{version}.tgz"


def queue_controller_manifest(kind: str, version: str) -> tuple[str, str]:
    """(artifact file name, upstream URL) of the Kueue or Volcano release manifests."""
    if kind == "kueue":
        url = f"https://github.com/kubernetes-sigs/kueue/releases/download/{version}/manifests.yaml"
        return f"kueue-{version}-manifests.yaml", url
    url = f"https://raw.githubusercontent.com/volcano-sh/volcano/{version}/installer/volcano-development.yaml"
    return f"volcano-{version}-development.yaml", url


#: The release of each queue controller a spec gets when it names none: Kueue's is the one whose CRDs and
#: configuration gpuforge carries (kueue-install); Volcano's the newest release tag in the snapshot
#: (volcano-releases). Each exists upstream: one default for both would name a tag the other lacks.
QUEUE_DEFAULT_VERSIONS = {"kueue": "v0.19.2", "volcano": "v1.15.1"}

#: (namespace, deployment) that must be Available before the queue manifests are applied.
QUEUE_CONTROLLER_DEPLOYMENTS = {
    "kueue": ("kueue-system", "kueue-controller-manager"),
    "volcano": ("volcano-system", "volcano-admission"),
}

#: NVIDIA's CUDA sample the GPU Operator docs run to verify an install (vectorAdd prints "Test PASSED");
#: the validator's cluster probe runs it on one GPU.
CUDA_SAMPLE_IMAGE = "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0-ubuntu22.04"
#: The container of the validator's Kueue admission probe (a suspended Job: it never needs to run).
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"


def validator_probe_images(batch_queue_kind: str) -> tuple[str, ...]:
    """The images of the pods the validator's cluster probe creates (a Volcano probe is a PodGroup, no pod)."""
    return (CUDA_SAMPLE_IMAGE, PAUSE_IMAGE) if batch_queue_kind == "kueue" else (CUDA_SAMPLE_IMAGE,)
