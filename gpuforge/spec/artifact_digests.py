"""The sha256 of every release file gpuforge knows, each with where it comes from: one data table.

A release file (``gpuforge.render.nvidia_sources.Artifact``: a package, tarball, binary, manifest or
chart fetched as a file) is used on a node, or put in the offline bundle, only once its sha256 is
known: from this table, or pinned by the operator in the spec (``sources.artifact_sha256``, which
adds to and overrides the table). A file whose sha256 is known from neither is never fetched: its
deploy step is reported unavailable, naming the file and the setting that pins it.

Two kinds of source (``SOURCES``, one entry per upstream):

* a checksum the project publishes: in its release notes (helm 4), or as a widely used installer
  pins it by version and architecture (kubespray's ``checksums.yml``: helm 3);
* a file served by the project's own repository at a release tag
  (``raw.githubusercontent.com/<repo>/<tag>/<path>``): its sha256 is that of the git blob at the
  tag's commit, ``git show <tag>:<path> | sha256sum``; each row names the commit.

Files with no published sha256 (``UNPUBLISHED``) need the operator's pin; the reasons are listed
there, so that an empty row is a decision, not an oversight.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuforge.spec import k8s_frameworks, k8s_upstream
from gpuforge.spec.citation import Citation

KUBESPRAY_COMMIT = "46dbdd3994b32640bcd806b0097f50e8fdf1d514"
HELM_4_2_4_COMMIT = "3900f434fd3ef2b84065dc04508df48f288dba00"

SOURCES: dict[str, Citation] = {
    "kubespray-helm": Citation(
        f"kubernetes-sigs/kubespray roles/kubespray_defaults/vars/main/checksums.yml (commit {KUBESPRAY_COMMIT})",
        "https://github.com/kubernetes-sigs/kubespray/blob/"
        f"{KUBESPRAY_COMMIT}/roles/kubespray_defaults/vars/main/checksums.yml",
        "helm_archive_checksums: amd64: '<version>: sha256:<hex>' (L742-755), the archive of "
        "roles/kubespray_defaults/defaults/main/download.yml L166 helm_download_url "
        "'{{ get_helm_url }}/helm-v{{ helm_version }}-linux-{{ image_arch }}.tar.gz' (get.helm.sh, whose "
        "<archive>.sha256sum files publish the same digests); 3.16.3: "
        "f5355c79190951eed23c5432a3b920e071f4c00a64f75e077de0dd4cb7b294ea; its newest helm is 3.18.4",
    ),
    "helm-release-notes": Citation(
        "helm/helm GitHub release v4.2.4 (published 2026-08-13, tag commit 3900f434fd3ef2b84065dc04508df48f288dba00)",
        "https://github.com/helm/helm/releases/tag/v4.2.4",
        "Installation and Upgrading: '[Linux amd64](https://get.helm.sh/helm-v4.2.4-linux-amd64.tar.gz) "
        "([checksum](https://get.helm.sh/helm-v4.2.4-linux-amd64.tar.gz.sha256sum) / "
        "c306b46f719b0a4da32d0f78ee21bf90ce8d602f15b22ab753f0674d1670a7f3)'; the same digest is pinned by "
        "independent public installers of helm 4.2.4",
    ),
    "calico-manifest": Citation(
        "projectcalico/calico manifests/calico.yaml at each release tag",
        "https://raw.githubusercontent.com/projectcalico/calico/<tag>/manifests/calico.yaml (k8s_upstream 'calico')",
        "the URL serves the git blob of manifests/calico.yaml at the tag; sha256 of 'git show "
        "<tag>:manifests/calico.yaml' at the commit named per row (v3.29.1: ddfc3b1ea724e2580c68d34950f0ccd318ae3ebf, "
        "blob a17ebe2dbeb97011fffd38fba92d7ae0652ee395, 323422 bytes; v3.32.1: blob "
        "2b3c7c391aea9080c54f94047b76791e44925542, 349572 bytes, images quay.io/calico/*:v3.32.1); every row's "
        "manifest names the calico images of its own tag",
    ),
    "flannel-manifest": Citation(
        "flannel-io/flannel Documentation/kube-flannel.yml at each release tag; Makefile 'release-chart'",
        "https://raw.githubusercontent.com/flannel-io/flannel/<tag>/Documentation/kube-flannel.yml",
        "the release asset kube-flannel.yml is 'kubectl kustomize ./Documentation/kustomization/kube-flannel/ > "
        "dist/kube-flannel.yml' run by the release workflow (v0.26.1 Makefile L167-171, .github/workflows/"
        "release.yml 'make release'), built at release time and published with no checksum; the release commit "
        "('Prepare version 0.26.1 release', 3c5afe727f2464c8335fbcd65bf69b7d31aa3577) commits that manifest as "
        "Documentation/kube-flannel.yml (images docker.io/flannel/flannel:v0.26.1, the kustomization's "
        "'k8s-app: flannel' labels). gpuforge fetches that file at the tag; sha256 of 'git show "
        "<tag>:Documentation/kube-flannel.yml' at the commit per row. Tags whose committed file still names an "
        "older flannel image (v0.26.3, v0.26.5, v0.27.1, v0.28.0) are left out. From v0.27.0 the images are "
        "ghcr.io/flannel-io/flannel:<tag>; v0.28.9: 'Prepare for release v0.28.9' "
        "(5cd0d52648e891d73a6dcb9bb2c67d7c365cf7aa), Makefile L190 the same kustomize line",
    ),
    "volcano-manifest": Citation(
        "volcano-sh/volcano installer/volcano-development.yaml at each release tag",
        "https://raw.githubusercontent.com/volcano-sh/volcano/<tag>/installer/volcano-development.yaml "
        "(k8s_upstream 'volcano-install')",
        "the URL serves the git blob at the tag; sha256 of 'git show <tag>:installer/volcano-development.yaml' "
        "at the commit per row; every row's manifest names the volcano images of its own tag",
    ),
    "kuberay-helm-index": k8s_frameworks.SOURCES["kuberay-helm-index"],
}

#: Release files nothing publishes a sha256 for, and why: the operator pins the sha256 of the file
#: they trust in ``sources.artifact_sha256`` (checked against the same bytes on every node).
UNPUBLISHED: dict[str, str] = {
    "enroot": "NVIDIA/enroot's GitHub releases attach the .deb/.rpm packages without checksums",
    "pyxis": "NVIDIA/pyxis' source tarball is GitHub's generated archive of the tag, with no published checksum",
    "nvidia-mig-manager": "NVIDIA/mig-parted's release packages are attached without checksums",
    "dcgm-exporter": "NVIDIA publishes no dcgm-exporter binary; the site builds or mirrors it",
    "kueue": "kueue's manifests.yaml is built by 'kustomize build config/default' at release time "
    "(kubernetes-sigs/kueue Makefile 'artifacts') and attached without a checksum",
    "gpu-operator": "the GPU Operator chart archive is served by NVIDIA's NGC helm repository, whose index "
    "is not a source gpuforge can cite",
    "kuberay-operator": "the KubeRay chart repository's index publishes each release's digest, but the "
    "snapshot of it gpuforge cites ends at 1.4.2 (k8s_frameworks 'kuberay-helm-index'): later releases, "
    "the default 1.7.0 included, need the operator's pin",
    "network-operator": "the Network Operator chart archive is served by NVIDIA's NGC helm repository, whose "
    "index is not a source gpuforge can cite",
    "kubeflow-trainer": "Kubeflow Trainer's chart is an OCI artifact (ghcr.io/kubeflow/charts): the registry "
    "names its manifest by digest, and no sha256 of the archive helm pull leaves is published",
    "cuda-keyring": "NVIDIA publishes no checksum of cuda-keyring_1.1-1_all.deb outside its repository's own "
    "index; gpuforge checks the key it carries by fingerprint instead (gpuforge.spec.repo_keys)",
}


@dataclass(frozen=True)
class KnownDigest:
    """The sha256 of one release file and where it is from (``source``: a ``SOURCES`` key; ``commit``:
    the upstream commit the digest was taken at)."""

    sha256: str
    source: str
    commit: str


def _rows(text: str) -> dict[str, tuple[str, str]]:
    """``<tag> <commit> <sha256>`` lines -> {tag: (commit, sha256)}."""
    return {tag: (commit, sha) for tag, commit, sha in (line.split() for line in text.strip().splitlines())}


#: helm-v<version>-linux-amd64.tar.gz published in Helm's own release notes (helm-release-notes).
_HELM_RELEASE_NOTES_AMD64: dict[str, str] = {
    "4.2.4": "c306b46f719b0a4da32d0f78ee21bf90ce8d602f15b22ab753f0674d1670a7f3",
}

#: helm-v<version>-linux-amd64.tar.gz (kubespray-helm).
_HELM_AMD64: dict[str, str] = {
    "3.18.4": "f8180838c23d7c7d797b208861fecb591d9ce1690d8704ed1e4cb8e2add966c1",
    "3.18.3": "6ec85f306dd8fe9eb05c61ba4593182b2afcfefb52f21add3fe043ebbdc48e39",
    "3.18.2": "c5deada86fe609deefdf40e9cbbe3da2f8cf3f6a4551a0ebe7886dc8fcf98bce",
    "3.18.1": "b1c7e8e261fd30f34c617282813ecafc63628fcd59a255a9fc51b1fe43394c05",
    "3.18.0": "961e587fc2c03807f8a99ac25ef063fa9e6915f1894729399cbb95d2a79af931",
    "3.17.3": "ee88b3c851ae6466a3de507f7be73fe94d54cbf2987cbaa3d1a3832ea331f2cd",
    "3.17.2": "90c28792a1eb5fb0b50028e39ebf826531ebfcf73f599050dbd79bab2f277241",
    "3.17.1": "3b66f3cd28409f29832b1b35b43d9922959a32d795003149707fea84cbcd4469",
    "3.16.4": "fc307327959aa38ed8f9f7e66d45492bb022a66c3e5da6063958254b9767d179",
    "3.16.3": "f5355c79190951eed23c5432a3b920e071f4c00a64f75e077de0dd4cb7b294ea",
    "3.16.2": "9318379b847e333460d33d291d4c088156299a26cd93d570a7f5d0c36e50b5bb",
    "3.16.1": "e57e826410269d72be3113333dbfaac0d8dfdd1b0cc4e9cb08bdf97722731ca9",
    "3.16.0": "327cfbc7ddc5a3eb644039ceb0cff66394628654c4f5a76bf715ed15b893983b",
}

#: calico-<tag>.yaml: tag -> (commit, sha256) (calico-manifest).
_CALICO: dict[str, tuple[str, str]] = _rows(
    """
v3.28.0 413e6f5593a8e76d34cf5338a642265da52561ce 93e7f39c3f93f9dc67ee2386aa7240d8d13ff62e54535a2f5f6432e8c6c0f24f
v3.28.1 6018563438f3aacf5e043dea0c567abe5d34c08a 3349111bfb38ded7c5ddd60018aa1d36f315c4a64902e1c18adba632634c5cf7
v3.28.2 9a96ee39f3833c3eabde151add8a84d546bcf24d be59408bf990e96276f631d2f9285c2a0f9802194c0ad1cecdb6d9c52623a1c8
v3.28.3 e2b74bea369b1ddf28141a4f81aa32abf5a62b53 1c3a94d1699fb47c99328ea8222e5b9c13d7b2179060a51d1d566cd105ecb1fe
v3.28.4 122890af8399e898c5f29eb1d9efcc6d5da39c78 a2c487ab79bcba3029c256080f4c734b1e532a551374168a5410c927297def50
v3.28.5 1bf7ccd12971a007f5776e8edd992ced6317c187 206678e7adb2e931bb97385300c408490635616f371941d68468207d6e0f9713
v3.29.0 26c4c71c76cafea610380a55ee4ae45e09a8215c 7fd596a7930499b4e752352fbd7f2facea6f908f899e86695e59d063aa7b058d
v3.29.1 ddfc3b1ea724e2580c68d34950f0ccd318ae3ebf ef325a26cb4e0a2d386d0e512c0cf4fd0fa935ac25777b41b0d3737153025a1c
v3.29.2 05bdc34b298940af451748481cc03d85e428f13f 999fe49427009aa1e6cc627061f9d54142c0d9dbe764350a70b4a5ac23c16afc
v3.29.3 b5d7d74c111d943251b61827ea88d9e5518f823b 9a575859428b822a224dedafc4238555b6b0f910f2abf12983f20f871860914e
v3.29.4 019fcb9c799a0fb3a93e73298efd5daf7bcf69ea aa1a7ebc273a2ea74fb33aae52990136ac79f2f3e64c47bec8c13c2fa7305bc7
v3.29.5 81fa97c10ef30228a45d459965f981da5b710acf 87c61207996dd1a97b86c0a5af6c9ca98af7a9f053a5f52ed018ef46029c676a
v3.29.6 0c77c078853d7c210ba183fd5c8f1bd751352bd8 4151e2aa54478b8396bb8ccaa16f3e697da9b6929e715cbec5dc9a98d3c5f229
v3.29.7 82fd18c202ac5400cd7760597a510de9d028b035 b200cb3c2c7341717abe98e4acc80a13117bcd2c9c46ad46e8c209c5753f0b2f
v3.31.7 94bd1d5b0e04459d4d1c83653e0335a9201248b8 d6d8a489a4ed8e5b8efd8b339047b496ca657b55ee2e3618e791507b0a853e8d
v3.32.0 eb1cf57823a1dd8d25c48b82fd023ea9e3e17996 bccabc607685551db918f66da724893eca3e69a50c5a3e3077029b02dbab8d35
v3.32.1 0ca9d1b93644778cafdf1812f3dda02ac0c361e8 a1df919d9721cf667accdc3e72848911b0cb25cfab7d2478ad0c996302c95744
"""
)

#: kube-flannel-<tag>.yml: tag -> (commit, sha256) (flannel-manifest).
_FLANNEL: dict[str, tuple[str, str]] = _rows(
    """
v0.25.0 56cfbcdeab0a3ade58bfae9ffbefaa2b814ecb8d 7cf96094d7821a45a08962221bd96ae7b836f9f193799d743c46247e78bc4fa5
v0.25.1 f0215be22814581788ac48047b926dd011bc861d 51cf28d53b85683d7c28290fa12bc3ecdbd82bbaf866df5e482251f5a748755b
v0.25.2 bf598473dc712cd7cc8ad2c621969a8c4a134b17 98c66bc96a262c6c7109da098800a514e3668162ce16f2c91b098b9ebfaf20ea
v0.25.3 b469eaea226f1a03383b5adaf0c6df5e49360f8f 510d33f962374f210585ed5273a3ad8ef130ce2b65486ec91ddde845ae679fd1
v0.25.4 e3725e8bb4e6e7a7e30247460188654087594e60 ad8823eae58492c2bebfcad2a706e09a618ad1c2a83bef5015128b2de7bde273
v0.25.5 87a5058fb6fc9c03764a6da17bb6aa46570508c5 075ed7aa638d99d43e99eac7e274085b0f84f73ee43fb0404fdf6fbff443f825
v0.25.6 da774f2f523db109c3b9a81926de99c557ddbfca e6e1a291dad04625de6aee5ab4352a9652f376d02b5bce39c357892ec10dd1e5
v0.25.7 41d7069b8cfec1fc657adcd26e6a825879dab38f 1f9d894f4cf6d3ff78b991341de02fefe64bfa88575bafc2a967eaeaa252a596
v0.26.0 79bd7f2d9264694e785c1d853339c42c39346f6d d354ce28dd509b68aa8900652ec095c6825fa943e2dee20cea6358da0d3287bf
v0.26.1 3c5afe727f2464c8335fbcd65bf69b7d31aa3577 7bc4fc42328f5a0d53b3f9a80bccaa618ec984b1e08539f5ebf66a950184fe42
v0.26.2 e810d96f557a0dc39125800f3d1ab56a0b9c40d1 8dc9145865eac5ba710b6cc4be52518195548a8122ea56a4a7ee25d83a812a6f
v0.26.4 c22fb8cdd05638fbc9095f05ecce5ea3a13e16c6 57e0d4adc3d4aa6842d98ff94bab4e2a66eb4e3a22046e5ca2d80783fda04903
v0.26.6 a7ae36f433016e0caad69a3baf05f629c6b60c89 8b624fd8750ed0a94fd4adcc0379ef67fb1695d8bdf5d44483771fd4c81a1eb4
v0.26.7 db296e3efd5368450c67bbd6ae21f42d357e8c83 d3f539ef073032bdbd2d32900719400e0050a8ae1d00a9fef75d9d0f079c7d54
v0.27.0 cf342d377f5920c74c2cc880d0d9ea05e0a93886 c5d2031c3bbf568480bb2baed8a4f051983417b56384b2bc6e3679abca4d9906
v0.27.2 1bf0b6de86034efb0ad313e091716a829abdfe01 58fd1389c036893e7bb6dc6eb68c6c460d39953429b625cd7b5fad434d6fca80
v0.27.3 b243632fbf70280bc46b949d9ea5ace5d91ef105 2797f01352f60d8ba3f176c80566a416cd2a67bca0730e088828638c0343c07a
v0.27.4 20bdda0b238784fbfa623a1cf4c469645f531efa 2242ee218f3c3e724e4efe5f31826a3e38cfdabf334de41aee2b12b48fd4818d
v0.28.1 5b6fc3ae0bf7ce3abbffef72c1bd3e60cda58556 71746e943864ef4b9fa318ae46ae25b45095db9960a857f168e7b21561cecf16
v0.28.2 7be627deb7794ed2f749ab9d6e06e60df5b362cf d833bdd130f016315fa52bd974aa5b69a08b39cf545fc63ef33dfdca1fa3726d
v0.28.3 3f69102a308cd8ac34a71eec6a42ce7416cbda7d baeb439f494c3329dc84d9f4fbd3a7b7cafb41e664e2bc0a80127b0348ab7012
v0.28.4 3adfe3e04407869b9f84be0a68a6cebb73df9c6e 0bd380eb4954227c903bdea96dc9254650badd2d45ebe31978a47c3ffe2e9727
v0.28.5 d47fd8e5f1c93fe7fd80cb06d7fc41ac502e2376 8731070bca4303bbe7f7a0c7fbcab8d5fc6fb16a3f61629cbecea7bf6caab7ca
v0.28.6 803cabde82600a84f94c1d0de89d22a9a255e687 36fdefbb805355c32a7b0f683ceb47e5085fa1b2b8c51e04ac8b981321e2c1cd
v0.28.7 4adfab1f33f385f51329bd47dfa7ec57e5049311 9b886d8bf6c8f095d9dee07745c048f514a8800aa394968999d13d46cd0df8f6
v0.28.8 653531a376e6148a58aedc43a78e4cdc8020f8bd d5ec6500c8050667ef5e6c4dc59b750075db8cf32f45b12961349208c5f326da
v0.28.9 5cd0d52648e891d73a6dcb9bb2c67d7c365cf7aa e875824be2f552b45711dbda91af81b17eb961d00025d914d9fef18fad8f09c0
"""
)

#: volcano-<tag>-development.yaml: tag -> (commit, sha256) (volcano-manifest).
_VOLCANO: dict[str, tuple[str, str]] = _rows(
    """
v1.10.0 c601aed1f0bbedc254eaafed5dc57b0cc90fb60c 98fbe65dd8344308284e91ada82fb025b0514fe6b173ea02013398b236876b2c
v1.10.1 7b8b9b0dd1efeb300eb6b019857ea3e4f1824360 c0b74a3424f2feb3d4d12e3a72da987aacdd64b5e36bb121a308106e32fef063
v1.10.2 ca2dbb36bb41232afd68a7ced85451a7f3b9f12a 4e263828194f39e600b1e735eb4e07c4a5d9cdf160e0d287f796f36e6b425169
v1.11.0 f1141171980bee89114c9be3f0e3c1472848e0b0 4610903de0d1a0e6c032604d5f909bbed51a63b6886ca488f8acdb8974edfef3
v1.11.1 879cdf3adef11cab7a8d44852f61e6255d7fc400 238f3f9be24eac31f5ab2afc8053665fc53addaf9e370eea01c7b57d0cba6a1a
v1.11.2 735842af59b9be0da5090677db7693c98a798b2a 63eda34ab5d992e991d5fa6277e850b2080100a41a58a29e2540b6990229e1a9
v1.12.0 d24c04ca1a2813c506a1d9d3cd38dca9bf7ce400 09ec9fd4679806b89938f0c6fe068eaebf428f237ff1e1992b63a82a94efcee2
v1.12.1 f7acc998d1b23f045b3e3f53cdccff1695bbff37 29a6499d5cd43991bd28f9b260581fd087d8fbf026cbc39df5ed5bc4d13003c8
v1.12.2 9b72eacdc07eb1edefa2c737eab1b467c301558a 7484901d01973dd06b47b3b9e6688f86b79119921b8ab89aefec974e13250531
v1.12.3 afdefddf42f462c5531666915e72cd3d22cd3240 c892b59ab9a791d5988e5f5aad8561514952359defc5fcd5aa20d809af5e0811
v1.12.4 28043a49084093e089981e0fa2720ad899346c4a 628149d5508c1fb9fc6fba874f5039ca0957fd758bde22cd6434931946ebe55d
v1.13.0 943b8c23d402462b63f1e21f7f7a39129ba8d63c d9c36a587a6ac970f5d13e91f95fc53d1b21119b3781496f760b510aaf28b1ea
v1.13.1 0c6f3bf706ad6790b1e806ef5e65c2ffdb3418ba 6d7e5f16a9cab73d0573717a0e31abeba0c6c6af881336f4442a8731a38b215f
v1.13.2 8f7a52a6e0a188a3cf42483bfa74fce122bd5599 5645da68e407e2977e79e8506559d0ac06adb2d223a143d126406e90b57aabb2
v1.13.3 5fe5adf1cc501a3d66950a84a47e0543606bf47e 7159e2d75b81ad29f688a554b014c37ebe45bab8a72bdaec631b5b6f3b2d978b
v1.14.0 6f86a47f32772ca8df248add31d01385a8a097b4 f6ffcb7558d4c2ffbbb3a537141daeecc3d114e747c273d0db9b933fb38aa182
v1.14.1 49b8f40ba6247b9a6a65e14e6e14c4fb19feb77c b5fc426e0984856ba2d9a3f327fb207430094af30ddc8f37a8d8b39fe5500239
v1.14.2 92d6e4cdcc5cb6cb6a10ae9a3025104a0066adba 583ecc73d85963aa0024cd82bce0431a1b516bbaf5a24c9a65fe623db2c365a7
v1.14.3 27fec3b5cfab105e1eb731c470e33c98784b76ff 566148496154c0598aca561415a481183b9be7d4626432d4a1d4ac552d924366
v1.14.4 2160f3d687229094bb47b9b55540af711925c11c fe5626e9a3f3f363e9426b9c3c340a630892b0fb29e303be463239fdd11c974b
v1.15.0 8fc394c11e8db0d0ada5c17816b58bced9d7213d bf8f59bf0bf8ed85c1375e5612e18e09814b3e2bd4e17c6aaa36f69f221c7ea6
v1.15.1 0a56ed331897f5455916a44d3075671376d731d6 b5fb45a57bcd1132be7055354999d244266873710609afd1f162005772d15c41
"""
)


def _table() -> dict[str, KnownDigest]:
    """File name (as ``gpuforge.render`` names the artifact) -> its known digest."""
    out: dict[str, KnownDigest] = {}
    for version, sha in _HELM_AMD64.items():
        out[k8s_upstream.helm_tarball(version)[0]] = KnownDigest(sha, "kubespray-helm", KUBESPRAY_COMMIT)
    for version, sha in _HELM_RELEASE_NOTES_AMD64.items():
        out[k8s_upstream.helm_tarball(version)[0]] = KnownDigest(sha, "helm-release-notes", HELM_4_2_4_COMMIT)
    for plugin, rows, source in (("calico", _CALICO, "calico-manifest"), ("flannel", _FLANNEL, "flannel-manifest")):
        for tag, (commit, sha) in rows.items():
            out[k8s_upstream.cni_manifest(plugin, tag)[0]] = KnownDigest(sha, source, commit)
    for tag, (commit, sha) in _VOLCANO.items():
        out[k8s_upstream.queue_controller_manifest("volcano", tag)[0]] = KnownDigest(sha, "volcano-manifest", commit)
    for version, sha in k8s_frameworks.KUBERAY_CHART_SHA256.items():
        name = k8s_frameworks.chart_file(k8s_frameworks.KUBERAY_CHART, version)
        out[name] = KnownDigest(sha, "kuberay-helm-index", k8s_frameworks.KUBERAY_INDEX_COMMIT)
    return out


#: Every known digest, by artifact file name.
KNOWN: dict[str, KnownDigest] = _table()


def known_digest(name: str) -> KnownDigest | None:
    """The cited digest of the release file ``name`` (None: nothing published is known)."""
    return KNOWN.get(name)


def pin_hint(name: str) -> str:
    """What an operator writes to pin a release file's sha256 (names the file and the setting)."""
    return f"pin the sha256 of the file you trust in the spec: sources.artifact_sha256: {{{name}: <64 hex digits>}}"
