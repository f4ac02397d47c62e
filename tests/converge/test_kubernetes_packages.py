"""Kubernetes packages from pkgs.k8s.io (or its mirror, or the bundle): facts in, exact files and steps
out, per OS and source mode, checked against the upstream facts table (gpuforge.spec.k8s_upstream)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuforge.deploy.apt import install_command
from gpuforge.deploy.converge import LayerFacts, StepKind
from gpuforge.deploy.layers.kubernetes import kubernetes_layer
from gpuforge.deploy.runstate import RunState
from gpuforge.render import k8s_packages as pkgs
from gpuforge.render.key_check import key_check_command
from gpuforge.spec import k8s_upstream, resolve_nodes
from gpuforge.spec.load import parse_spec
from tests import yaml_text
from tests.conftest import REPO
from tests.helpers import RENDER_ONLY_BUNDLE_FINGERPRINT

K8S = REPO / "inventories" / "k8s-gpu-operator.yaml"
OS_NAMES = {"debian12": "debian12", "ubuntu22.04": "ubuntu2204", "ubuntu24.04": "ubuntu2404", "rhel9": "rhel9"}
AT_PIN = {"kubelet": "1.31.4-1.1", "kubeadm": "1.31.4-1.1", "kubectl": "1.31.4-1.1"}
KEY_PRESENT = {pkgs.K8S_KEYRING: "-----BEGIN PGP PUBLIC KEY BLOCK-----\n"}


def load(os_name: str = "ubuntu22.04", mutate: Any = None, base_dir: Path | None = None) -> Any:
    data = yaml.safe_load(K8S.read_text())
    data["cluster"]["os"] = os_name
    data["versions"]["kubernetes"] = "1.31.4"  # the repository layout under test is the same for every minor
    if os_name == "rhel9":
        data["versions"]["driver"]["source"] = "nvidia"
    if mutate:
        mutate(data)
    return parse_spec(yaml_text.dump(data), "k8s.yaml", base_dir=base_dir or K8S.parent)


def worker(spec: Any) -> Any:
    return next(n for n in resolve_nodes(spec) if n.name == "kgpu01")


def package_steps(spec: Any, packages: dict[str, str | None], contents: dict[str, str] | None = None,
                  changed: set[str] | None = None) -> list[Any]:  # fmt: skip
    layer = kubernetes_layer(spec, worker(spec))
    facts = LayerFacts(packages=dict(packages), contents={**(contents or {})})
    steps = layer.after(facts, set(changed or ()))
    return [s for s in steps if s.kind not in (StepKind.MODULES, StepKind.SYSCTL, StepKind.SWAP)]


@pytest.mark.parametrize("os_name", ["debian12", "ubuntu22.04", "ubuntu24.04"])
def test_deb_nodes_get_the_minor_repository_and_a_pin(os_name: str) -> None:
    spec = load(os_name)
    files = {f.path: f.data.decode() for f in pkgs.k8s_repo_files(spec, worker(spec))}
    assert files[pkgs.K8S_LIST] == (
        f"deb [signed-by={pkgs.K8S_KEYRING}] https://pkgs.k8s.io/core:/stable:/v1.31/deb/ /\n"
    )
    pin = files[pkgs.K8S_PIN]
    assert "Package: kubelet kubeadm kubectl\nPin: version 1.31.4-*\nPin-Priority: 1001\n" in pin
    layer = kubernetes_layer(spec, worker(spec))
    assert [f.path for f in layer.early_files] == [pkgs.K8S_LIST, pkgs.K8S_PIN]
    assert layer.watch_packages == ("kubelet", "kubeadm", "kubectl") and not layer.rpm


def test_a_fresh_deb_node_fetches_the_key_installs_at_the_pin_and_holds() -> None:
    spec = load()
    changed = {pkgs.K8S_LIST, pkgs.K8S_PIN}
    key, install = package_steps(spec, {}, changed=changed)
    part = f"{pkgs.K8S_KEYRING}.part"
    assert key.kind is StepKind.KEYRING and key.command == (
        "install -d -m 0755 /etc/apt/keyrings && curl -fsSL --retry 3 --connect-timeout 20 -o "
        f"{part} https://pkgs.k8s.io/core:/stable:/v1.31/deb/Release.key && chmod 0644 {part} && "
        f"{key_check_command(part, k8s_upstream.KEY_FINGERPRINT)} && mv {part} {pkgs.K8S_KEYRING}"
    )  # moved into place only once it is pkgs.k8s.io's key (tests/bundle/test_k8s_repo_apt.py runs it)
    wanted = ["kubelet=1.31.4-*", "kubeadm=1.31.4-*", "kubectl=1.31.4-*"]
    assert install.command == (
        f"{install_command(wanted, downgrades=True, update_first=True)} && "
        "apt-mark hold kubelet kubeadm kubectl && systemctl enable kubelet"
    )  # nothing installed yet: nothing to unhold (apt-mark knows installed packages only)


def test_packages_at_the_pin_need_nothing() -> None:
    assert package_steps(load(), AT_PIN, KEY_PRESENT) == []


def test_another_patch_is_unheld_moved_and_held_again() -> None:
    spec = load(mutate=lambda d: d["versions"].update(kubernetes="1.31.6"))
    (install,) = package_steps(spec, AT_PIN, KEY_PRESENT)
    assert install.summary == (
        "Kubernetes packages at 1.31.6: kubelet 1.31.4-1.1 -> 1.31.6, kubeadm 1.31.4-1.1 -> 1.31.6, "
        "kubectl 1.31.4-1.1 -> 1.31.6"
    )
    wanted = ["kubelet=1.31.6-*", "kubeadm=1.31.6-*", "kubectl=1.31.6-*"]
    assert install.command == (
        f"apt-mark unhold kubelet kubeadm kubectl >/dev/null && {install_command(wanted, downgrades=True)} && "
        "apt-mark hold kubelet kubeadm kubectl && systemctl enable kubelet"
    )


def test_a_new_minor_changes_the_repository() -> None:
    spec = load(mutate=lambda d: d["versions"].update(kubernetes="1.32.2"))
    files = {f.path: f.data.decode() for f in pkgs.k8s_repo_files(spec, worker(spec))}
    assert "https://pkgs.k8s.io/core:/stable:/v1.32/deb/ /" in files[pkgs.K8S_LIST]


def test_rhel_gets_upstreams_repo_file_and_dnf_with_disableexcludes() -> None:
    spec = load("rhel9")
    files = {f.path: f.data.decode() for f in pkgs.k8s_repo_files(spec, worker(spec))}
    assert files == {
        pkgs.K8S_REPO_FILE: (
            "[gpuforge-kubernetes]\nname=Kubernetes (gpuforge)\n"
            "baseurl=https://pkgs.k8s.io/core:/stable:/v1.31/rpm/\nenabled=1\ngpgcheck=1\n"
            f"gpgkey=file://{pkgs.K8S_RPM_KEY}\n"  # not the URL: dnf would import whatever key it serves
            "exclude=kubelet kubeadm kubectl cri-tools kubernetes-cni\n"
        )
    }
    layer = kubernetes_layer(spec, worker(spec))
    assert layer.rpm and layer.read_paths.count(pkgs.K8S_RPM_KEY) == 1 and pkgs.K8S_KEYRING not in layer.read_paths
    key, install = package_steps(spec, {})
    part = f"{pkgs.K8S_RPM_KEY}.part"
    assert key.kind is StepKind.KEYRING and key.command == (
        "install -d -m 0755 /etc/pki/rpm-gpg && curl -fsSL --retry 3 --connect-timeout 20 -o "
        f"{part} https://pkgs.k8s.io/core:/stable:/v1.31/rpm/repodata/repomd.xml.key && chmod 0644 {part} && "
        f"{key_check_command(part, k8s_upstream.KEY_FINGERPRINT)} && mv {part} {pkgs.K8S_RPM_KEY}"
    )  # the key dnf reads, put in place only once it is pkgs.k8s.io's
    assert install.command == (
        "dnf -y install --disableexcludes=gpuforge-kubernetes kubelet-1.31.4 kubeadm-1.31.4 kubectl-1.31.4 "
        "&& systemctl enable kubelet"
    )
    at_pin = {p: "1.31.4-150500.1.1" for p in k8s_upstream.PACKAGES}
    assert package_steps(spec, at_pin, {pkgs.K8S_RPM_KEY: "-----BEGIN PGP PUBLIC KEY BLOCK-----\n"}) == []


def test_a_mirror_keeps_pkgs_k8s_ios_layout() -> None:
    def mirror(d: dict[str, Any]) -> None:
        d["sources"] = {"mode": "mirror", "mirrors": {"kubernetes": "https://mirror.example.org/k8s/"}}

    spec = load(mutate=mirror)
    repo = pkgs.kubernetes_repo(spec, worker(spec).os)
    assert repo.url == "https://mirror.example.org/k8s/core:/stable:/v1.31/deb"
    assert repo.key_url == "https://mirror.example.org/k8s/core:/stable:/v1.31/deb/Release.key"


def test_mirror_mode_without_a_kubernetes_mirror_is_reported_not_tried() -> None:
    spec = load(mutate=lambda d: d.update(sources={"mode": "mirror", "apt_proxy": "http://192.0.2.1:3142"}))
    steps = package_steps(spec, {})
    assert [(s.kind, s.command) for s in steps] == [(StepKind.UNAVAILABLE, None)]
    assert "sources.mirrors.kubernetes" in steps[0].summary
    assert pkgs.k8s_repo_files(spec, worker(spec)) == []
    assert kubernetes_layer(spec, worker(spec)).watch_packages == ()


def test_offline_uses_the_bundles_repository(tmp_path: Path) -> None:
    bundle = tmp_path / "bundle"
    (bundle / "apt" / "kubernetes").mkdir(parents=True)
    (bundle / "apt" / "kubernetes" / "Packages").write_text("Package: kubeadm\nVersion: 1.31.4-1.1\n")
    sources = {"mode": "offline", "bundle_dir": str(bundle), "bundle_fingerprint": RENDER_ONLY_BUNDLE_FINGERPRINT}
    spec = load(mutate=lambda d: d.update(sources=sources))
    layer = kubernetes_layer(spec, worker(spec))
    paths = [f.path for f in layer.early_files]
    assert "/var/lib/gpuforge/bundle/apt/kubernetes/Packages" in paths
    files = {f.path: f.data.decode() for f in pkgs.k8s_repo_files(spec, worker(spec))}
    assert files[pkgs.K8S_LIST] == (
        "deb [signed-by=/etc/apt/keyrings/gpuforge-bundle.gpg] file:/var/lib/gpuforge/bundle/apt/kubernetes ./\n"
    )
    assert [s.kind for s in package_steps(spec, {})] == [StepKind.INSTALL]  # no key fetched


def test_a_changed_source_with_packages_in_place_refreshes_the_lists() -> None:
    (refresh,) = package_steps(load(), AT_PIN, KEY_PRESENT, changed={pkgs.K8S_LIST})
    assert refresh.kind is StepKind.APT_UPDATE


def test_the_layer_records_membership_for_the_join() -> None:
    spec = load()
    run = RunState()
    layer = kubernetes_layer(spec, worker(spec), run)
    layer.after(LayerFacts(packages=AT_PIN, contents=KEY_PRESENT), set())
    assert run.k8s_joining() == ["kgpu01"]
    joined = {**KEY_PRESENT, k8s_upstream.KUBELET_CONFIG: "kind: KubeletConfiguration\n"}
    layer.after(LayerFacts(packages=AT_PIN, contents=joined), set())
    assert run.k8s_joining() == []


@pytest.mark.parametrize("os_name", list(OS_NAMES))
def test_the_facts_table_names_every_source(os_name: str) -> None:
    spec = load(os_name)
    repo = pkgs.kubernetes_repo(spec, worker(spec).os)
    assert repo.url is not None and repo.url.startswith(k8s_upstream.PKGS_K8S_IO)
    assert k8s_upstream.SOURCES["install-kubeadm"].where.startswith("https://kubernetes.io/docs/")
    assert "Release.key" in k8s_upstream.SOURCES["install-kubeadm"].section
    assert "repomd.xml.key" in k8s_upstream.SOURCES["install-kubeadm"].section
