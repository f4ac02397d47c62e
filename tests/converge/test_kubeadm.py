"""kubeadm on Kubernetes nodes: facts in, exact steps out (init, join token, join, repairs), the
rendered kubeadm configs against kubeadm's API field names, and gpuforge's cluster PKI."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509

from gpuforge.deploy.converge import STAGING_DIR, UPLOAD_DIR, LayerFacts, StepKind, upload_commands
from gpuforge.deploy.k8s_pki import ca_cert_hash, generate_pki
from gpuforge.deploy.layers.kubeadm import (
    KUBEADM_PENDING,
    control_plane_layer,
    join_layer,
    join_token_layer,
    pending_run,
)
from gpuforge.deploy.runstate import RunState
from gpuforge.deploy.secrets import SecretStore
from gpuforge.orchestrate.apply import run_deploys
from gpuforge.render import kubeadm as cfg
from gpuforge.render.files import RenderedFile
from gpuforge.spec import k8s_upstream, resolve_nodes
from gpuforge.spec.cluster import load_cluster
from gpuforge.spec.load import parse_spec
from tests import yaml_text
from tests.conftest import REPO
from tests.converge.simulated import SimulatedCluster, simulated, write_simulated_spec
from tests.render.kubeadm_api_fields import KUBELET_CONFIGURATION_FIELDS, unknown_fields

K8S = REPO / "inventories" / "k8s-gpu-operator.yaml"
MEMBER = {k8s_upstream.KUBELET_CONFIG: "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"}
INTERRUPTED = {**MEMBER, KUBEADM_PENDING: "join\n"}
INIT = pending_run(f"kubeadm init --config {cfg.KUBEADM_INIT_CONFIG} --skip-token-print", "init")


@pytest.fixture(scope="module")
def pki() -> dict[str, bytes]:
    return generate_pki()


def load(mutate: Any = None) -> Any:
    """The example behind a site's load balancer at its VIP and without an interface pin (kube-vip and
    ``node_interface``: tests/converge/test_k8s_ha_endpoint.py)."""
    data = yaml.safe_load(K8S.read_text())
    data["kubernetes"]["api_endpoint"] = {"type": "external", "address": "198.51.100.9"}
    data["kubernetes"].pop("node_interface", None)
    if mutate:
        mutate(data)
    return parse_spec(yaml_text.dump(data), "k8s.yaml", base_dir=K8S.parent)


def node(spec: Any, name: str) -> Any:
    return next(n for n in resolve_nodes(spec) if n.name == name)


def run_after(layer: Any, contents: dict[str, str]) -> list[Any]:
    assert layer.after is not None
    return list(layer.after(LayerFacts(contents=dict(contents)), set()))


def commands(steps: list[Any]) -> list[tuple[str, str | None]]:
    return [(s.kind.value, s.command) for s in steps]


# --------------------------------------------------------------------------- control plane


def test_first_control_plane_gets_the_shared_keys_the_config_and_kubeadm_init(pki: dict[str, bytes]) -> None:
    spec = load()
    layer = control_plane_layer(spec, node(spec, "kcp1"), pki)
    paths = {f.path: f for f in layer.files}
    assert set(paths) == {
        *(f"{k8s_upstream.PKI_DIR}/{rel}" for rel in pki),
        cfg.KUBEADM_INIT_CONFIG,
    }
    for rel in ("ca.key", "etcd/ca.key", "front-proxy-ca.key", "sa.key"):
        assert paths[f"{k8s_upstream.PKI_DIR}/{rel}"].mode == "0600" and paths[f"{k8s_upstream.PKI_DIR}/{rel}"].secret
    assert paths[f"{k8s_upstream.PKI_DIR}/ca.crt"].data == pki["ca.crt"]
    assert commands(run_after(layer, {})) == [("install", INIT)]


def test_a_control_plane_in_the_cluster_gets_no_kubeadm(pki: dict[str, bytes]) -> None:
    spec = load()
    assert run_after(control_plane_layer(spec, node(spec, "kcp1"), pki), MEMBER) == []


def test_an_interrupted_init_is_reset_and_the_keys_written_again(pki: dict[str, bytes]) -> None:
    spec = load()
    steps = run_after(control_plane_layer(spec, node(spec, "kcp1"), pki), INTERRUPTED)
    assert commands(steps)[0] == ("repair", "kubeadm reset -f")
    rewritten = [s.upload.path for s in steps if s.kind is StepKind.UPLOAD]
    assert sorted(rewritten) == sorted(f"{k8s_upstream.PKI_DIR}/{rel}" for rel in pki)
    assert commands(steps)[-1] == ("install", INIT)


def test_other_control_planes_get_the_keys_only(pki: dict[str, bytes]) -> None:
    spec = load()
    layer = control_plane_layer(spec, node(spec, "kcp2"), pki)
    assert layer.after is None and {f.path for f in layer.files} == {f"{k8s_upstream.PKI_DIR}/{r}" for r in pki}
    assert control_plane_layer(spec, node(spec, "kgpu01"), pki).is_empty


def test_pending_run_clears_its_marker_only_after_success(tmp_path: Path) -> None:
    marker = tmp_path / "pending"
    secret = tmp_path / "secret"
    for ok in (True, False):
        secret.write_text("token")
        marker.unlink(missing_ok=True)
        cmd = pending_run("true" if ok else "false", "join", str(secret))
        cmd = cmd.replace(KUBEADM_PENDING, str(marker)).replace("/var/lib/gpuforge/pending", str(tmp_path))
        rc = subprocess.run(["sh", "-c", cmd]).returncode
        assert (rc == 0) is ok
        assert not secret.exists()  # removed whatever happened
        assert marker.exists() is (not ok)  # the next run repairs a failed one


# --------------------------------------------------------------------------- join token


def test_a_token_is_created_only_when_a_node_joins(pki: dict[str, bytes]) -> None:
    spec = load()
    run = RunState()
    layer = join_token_layer(spec, node(spec, "kcp1"), run)
    run.record_k8s_member("kcp1", False)  # the first control plane inits, it does not join
    run.record_k8s_member("kgpu01", True)
    assert run_after(layer, {}) == []
    run.record_k8s_member("kgpu02", False)
    upload, create = run_after(layer, {})
    assert upload.upload.secret and upload.upload.mode == "0600" and upload.upload.path == cfg.JOIN_TOKEN_MANIFEST
    assert "kgpu02" in upload.summary and "kcp1" not in upload.summary
    assert create.command == (
        f"{{ kubectl --kubeconfig /etc/kubernetes/admin.conf create -f {cfg.JOIN_TOKEN_MANIFEST}; rc=$?; "
        f"rm -f {cfg.JOIN_TOKEN_MANIFEST}; exit $rc; }}"
    )
    secret = yaml.safe_load(upload.upload.data)
    token_id, token_secret = run.join_token().split(".")
    assert secret["metadata"] == {"name": f"bootstrap-token-{token_id}", "namespace": "kube-system"}
    assert secret["type"] == "bootstrap.kubernetes.io/token"
    data = secret["stringData"]
    assert (data["token-id"], data["token-secret"]) == (token_id, token_secret)
    assert data["auth-extra-groups"] == "system:bootstrappers:kubeadm:default-node-token"
    expires = datetime.strptime(data["expiration"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    assert timedelta(minutes=29) < expires - datetime.now(UTC) <= timedelta(minutes=30)
    for step in (upload, create):  # the token is in the 0600 file only
        assert token_secret not in step.summary and token_secret not in (step.command or "")
    assert join_token_layer(spec, node(spec, "kcp2"), run).is_empty


def test_a_run_has_one_token_of_the_documented_form() -> None:
    run = RunState()
    token = run.join_token()
    assert token == run.join_token()
    token_id, secret = token.split(".")
    assert len(token_id) == 6 and len(secret) == 16
    assert set(token_id + secret) <= set(k8s_upstream.TOKEN_ALPHABET)
    assert RunState().join_token() != token
    assert token not in repr(run)


# --------------------------------------------------------------------------- join


def test_a_worker_joins_with_the_run_token_and_the_pinned_ca(pki: dict[str, bytes]) -> None:
    spec = load()
    run = RunState()
    upload, join = run_after(join_layer(spec, node(spec, "kgpu01"), run, pki), {})
    assert upload.upload.path == cfg.KUBEADM_JOIN_CONFIG and upload.upload.mode == "0600" and upload.upload.secret
    doc = yaml.safe_load(upload.upload.data)
    discovery = doc["discovery"]["bootstrapToken"]
    assert discovery == {
        "apiServerEndpoint": "198.51.100.9:6443",  # kubernetes.api_endpoint of the example
        "token": run.join_token(),
        "caCertHashes": [ca_cert_hash(pki["ca.crt"])],
    }
    assert "controlPlane" not in doc
    assert join.command == pending_run(
        f"kubeadm join --config {cfg.KUBEADM_JOIN_CONFIG}", "join", cfg.KUBEADM_JOIN_CONFIG
    )
    assert run.join_token().split(".")[1] not in (join.summary + (join.command or "") + upload.summary)


def test_a_joined_node_gets_nothing_and_an_interrupted_join_is_reset(pki: dict[str, bytes]) -> None:
    spec = load()
    worker = join_layer(spec, node(spec, "kgpu01"), RunState(), pki)
    assert run_after(worker, MEMBER) == []
    steps = run_after(worker, INTERRUPTED)
    assert commands(steps)[0] == ("repair", "kubeadm reset -f")
    assert [s.upload.path for s in steps if s.upload is not None] == [cfg.KUBEADM_JOIN_CONFIG]  # no keys on workers
    plane = run_after(join_layer(spec, node(spec, "kcp2"), RunState(), pki), INTERRUPTED)
    assert len([s for s in plane if s.upload is not None]) == len(pki) + 1  # keys again, then the join config


def test_a_control_plane_joins_as_one(pki: dict[str, bytes]) -> None:
    spec = load()
    upload, join = run_after(join_layer(spec, node(spec, "kcp3"), RunState(), pki), {})
    doc = yaml.safe_load(upload.upload.data)
    assert doc["controlPlane"] == {"localAPIEndpoint": {"advertiseAddress": "198.51.100.12", "bindPort": 6443}}
    assert "as a control plane" in join.summary
    assert join_layer(spec, node(spec, "kcp1"), RunState(), pki).is_empty  # it inits


# --------------------------------------------------------------------------- configs


def test_init_config_follows_the_spec_and_kubeadms_field_names() -> None:
    spec = load(lambda d: d["kubernetes"].update(api_endpoint="k8s-api.example.org", pod_cidr="10.32.0.0/12"))
    init, cluster, kubelet = yaml.safe_load_all(cfg.init_config(spec, node(spec, "kcp1")))
    assert init["apiVersion"] == cluster["apiVersion"] == "kubeadm.k8s.io/v1beta4"
    assert init["nodeRegistration"] == {"name": "kcp1", "criSocket": "unix:///run/containerd/containerd.sock"}
    assert init["localAPIEndpoint"] == {"advertiseAddress": "198.51.100.10", "bindPort": 6443}
    assert cluster["controlPlaneEndpoint"] == "k8s-api.example.org:6443"
    assert cluster["kubernetesVersion"] == f"v{spec.versions.kubernetes}" and cluster["clusterName"] == "kgpu"
    assert cluster["networking"] == {"podSubnet": "10.32.0.0/12", "serviceSubnet": "10.96.0.0/12"}
    assert kubelet == {"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
                       "cgroupDriver": "systemd"}  # fmt: skip
    assert unknown_fields("InitConfiguration", init) == []
    assert unknown_fields("ClusterConfiguration", cluster) == []
    assert set(kubelet) <= KUBELET_CONFIGURATION_FIELDS
    assert "token" not in cfg.init_config(spec, node(spec, "kcp1"))  # kubeadm's own token is never printed


def test_join_config_uses_kubeadms_field_names(pki: dict[str, bytes]) -> None:
    spec = load()
    for name in ("kgpu01", "kcp2"):
        doc = cfg.join_document(spec, node(spec, name), "abcdef.0123456789abcdef", ca_cert_hash(pki["ca.crt"]))
        assert unknown_fields("JoinConfiguration", doc) == []


def test_older_kubernetes_gets_the_v1beta3_api_and_its_field_names(pki: dict[str, bytes]) -> None:
    def older(d: dict) -> None:  # type: ignore[type-arg]
        d["versions"].update(kubernetes="1.30.8")
        d["kubernetes"]["frameworks"]["trainer"]["enabled"] = False  # Kubeflow Trainer needs 1.31 or newer

    spec = load(older)
    init, cluster, _ = yaml.safe_load_all(cfg.init_config(spec, node(spec, "kcp1")))
    assert init["apiVersion"] == cluster["apiVersion"] == "kubeadm.k8s.io/v1beta3"
    assert unknown_fields("InitConfiguration", init) == []
    assert unknown_fields("ClusterConfiguration", cluster) == []
    for name in ("kgpu01", "kcp2"):
        doc = cfg.join_document(spec, node(spec, name), "abcdef.0123456789abcdef", ca_cert_hash(pki["ca.crt"]))
        assert doc["apiVersion"] == "kubeadm.k8s.io/v1beta3"
        assert unknown_fields("JoinConfiguration", doc) == []


def test_the_field_check_knows_what_each_kubeadm_api_lacks() -> None:
    """The check itself bites: v1beta4's dryRun is not a v1beta3 field, and an unknown API is named."""
    assert unknown_fields("InitConfiguration", {"apiVersion": "kubeadm.k8s.io/v1beta4", "dryRun": True}) == []
    assert unknown_fields("InitConfiguration", {"apiVersion": "kubeadm.k8s.io/v1beta3", "dryRun": True}) == [
        "InitConfiguration.dryRun"
    ]
    assert unknown_fields("JoinConfiguration", {"apiVersion": "kubeadm.k8s.io/v1beta2"}) == [
        "JoinConfiguration.apiVersion=kubeadm.k8s.io/v1beta2"
    ]
    nested = {"apiVersion": "kubeadm.k8s.io/v1beta3", "discovery": {"bootstrapToken": {"tokn": "x"}}}
    assert unknown_fields("JoinConfiguration", nested) == ["BootstrapTokenDiscovery.tokn"]


def test_an_ipv6_endpoint_is_bracketed() -> None:
    spec = load(lambda d: d["kubernetes"].update(api_endpoint="2001:db8::10"))
    assert cfg.api_endpoint(spec) == "[2001:db8::10]:6443"


# --------------------------------------------------------------------------- PKI


def test_the_pki_is_what_kubeadm_expects(pki: dict[str, bytes]) -> None:
    assert set(pki) == {"ca.crt", "ca.key", "front-proxy-ca.crt", "front-proxy-ca.key", "etcd/ca.crt",
                        "etcd/ca.key", "sa.key", "sa.pub"}  # fmt: skip
    for name, cn in (("ca", "kubernetes"), ("front-proxy-ca", "front-proxy-ca"), ("etcd/ca", "etcd-ca")):
        cert = x509.load_pem_x509_certificate(pki[f"{name}.crt"])
        assert cert.subject.rfc4514_string() == f"CN={cn}" and cert.issuer == cert.subject
        assert cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
        assert cert.not_valid_after_utc - cert.not_valid_before_utc >= timedelta(days=3650)
    assert len({pki["ca.crt"], pki["front-proxy-ca.crt"], pki["etcd/ca.crt"]}) == 3


def test_the_ca_hash_is_the_one_openssl_computes(pki: dict[str, bytes], tmp_path: Path) -> None:
    """kubeadm-join's documented pipeline: openssl x509 -pubkey | openssl rsa -pubin -outform der | sha256."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed: the documented pipeline cannot run (the hash is tested above)")
    crt = tmp_path / "ca.crt"
    crt.write_bytes(pki["ca.crt"])
    out = subprocess.run(
        ["sh", "-c", f"openssl x509 -pubkey -in {crt} | openssl rsa -pubin -outform der 2>/dev/null "
                     "| openssl dgst -sha256 -hex | sed 's/^.* //'"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    assert ca_cert_hash(pki["ca.crt"]) == f"sha256:{out}"


def test_the_store_makes_the_pki_once_and_keeps_it_private(tmp_path: Path) -> None:
    store = SecretStore("kgpu", root=tmp_path)
    first = store.kubernetes_pki()
    assert store.kubernetes_pki() == first
    base = tmp_path / "kgpu" / "secrets"
    assert base.stat().st_mode & 0o777 == 0o700
    for path in (base / "k8s-pki").rglob("*"):
        assert path.stat().st_mode & 0o077 == 0, path  # nothing readable by others, not even certificates
    assert not [p for p in base.iterdir() if p.name.startswith(".k8s-pki.")]  # no temporary directory left


# --------------------------------------------------------------------------- limited runs (simulated)


@pytest.fixture
def k8s_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The example Kubernetes spec with its SSH files under tmp_path; state under tmp_path."""
    monkeypatch.setenv("GPUFORGE_STATE_DIR", str(tmp_path / "state"))
    return write_simulated_spec(yaml.safe_load(K8S.read_text()), tmp_path, "kgpu.yaml")


def in_the_cluster(cluster: SimulatedCluster, *hosts: str) -> None:
    """``hosts`` answer every fact read with kubeadm's kubelet config present (members)."""
    config = base64.b64encode(MEMBER[k8s_upstream.KUBELET_CONFIG].encode()).decode()
    answer = ["__section=contents", f"{k8s_upstream.KUBELET_CONFIG}={config}"]
    for host in hosts:
        cluster.respond(r"__section=contents", answer, host=host)


STAGED_MANIFEST, INSTALL_MANIFEST = upload_commands(RenderedFile(cfg.JOIN_TOKEN_MANIFEST, b"", "0600", secret=True))
#: What the first control plane is sent when it only makes the join token (the example's SSH user
#: is ubuntu, with sudo: the upload goes through its private upload directory).
TOKEN_ONLY = [
    f"install -d -m 0700 {STAGING_DIR}",
    f"install -d -m 0755 /var/lib/gpuforge && install -d -m 0700 -o ubuntu {UPLOAD_DIR}",
    INSTALL_MANIFEST,
    f"{{ kubectl --kubeconfig {k8s_upstream.ADMIN_CONF} create -f {cfg.JOIN_TOKEN_MANIFEST}; rc=$?; "
    f"rm -f {cfg.JOIN_TOKEN_MANIFEST}; exit $rc; }}",
]


def test_a_new_worker_limited_alone_gets_a_token_made_on_the_first_control_plane(
    k8s_file: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``--limit kgpu02`` on a cluster whose first control plane is in: kcp1 is in the run for the
    token only (its upload and ``kubectl create``, nothing else), kgpu02 joins with that token, the
    result lists kgpu02 alone, and the token is in no command, event or plan."""
    cluster = simulated(monkeypatch, tmp_path)
    in_the_cluster(cluster, "kcp1")
    events: list[str] = []
    run = RunState()
    result = run_deploys(load_cluster(k8s_file), "kgpu02", lambda m: events.append(str(m)), run=run)
    assert result.ok, {n: h.error for n, h in result.hosts.items()}
    assert list(result.hosts) == ["kgpu02"]
    token_id, token_secret = run.join_token().split(".")
    assert cluster.commands["kcp1"] == TOKEN_ONLY
    ((staged, manifest),) = cluster.uploads["kcp1"]
    assert staged == STAGED_MANIFEST
    data = yaml.safe_load(manifest)["stringData"]
    assert (data["token-id"], data["token-secret"]) == (token_id, token_secret)
    joins = [d for _, d in cluster.uploads["kgpu02"] if b"JoinConfiguration" in d]
    assert len(joins) == 1 and yaml.safe_load(joins[0])["discovery"]["bootstrapToken"]["token"] == run.join_token()
    assert any("kubeadm join --config" in c for c in cluster.commands["kgpu02"])
    sent = [c for cmds in cluster.commands.values() for c in cmds]
    assert not [t for t in [*sent, *events] if token_secret in t]

    dry = RunState(dry_run=True)
    planned = run_deploys(load_cluster(k8s_file), "kgpu02", run=dry)
    assert list(planned.hosts) == ["kgpu02"] and planned.ok
    assert [op.layer for op in dry.planned["kcp1"]] == ["kubernetes-join-token"]
    shown = json.dumps({h: [[s.as_dict() for s in op.steps] for op in ops] for h, ops in dry.planned.items()})
    assert "kgpu02" in shown and dry.join_token().split(".")[1] not in shown


def test_a_limited_run_makes_a_token_only_when_a_selected_node_joins(
    k8s_file: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Members only (kcp2, kgpu01): no token, nothing sent to kcp1, no kubeadm. A new node
    (kgpu02) beside them: one token planned on kcp1, for that node alone."""
    cluster = simulated(monkeypatch, tmp_path)
    in_the_cluster(cluster, "kcp1", "kcp2", "kgpu01")
    run = RunState()
    result = run_deploys(load_cluster(k8s_file), "kcp2,kgpu01", run=run)
    assert result.ok and list(result.hosts) == ["kcp2", "kgpu01"]
    assert run.k8s_token is None and "kcp1" not in cluster.commands and "kcp1" not in cluster.uploads
    kubeadm = ("kubeadm init", "kubeadm join", "kubeadm reset", " create -f ")
    assert not [c for cmds in cluster.commands.values() for c in cmds if any(k in c for k in kubeadm)]

    dry = RunState(dry_run=True)
    assert run_deploys(load_cluster(k8s_file), "kcp2,kgpu01,kgpu02", run=dry).ok
    (token,) = dry.planned["kcp1"]
    assert token.layer == "kubernetes-join-token"
    assert [s.summary for s in token.steps] == [
        "write a 30-minute bootstrap token for kgpu02 (secret)",
        "create the bootstrap token (the manifest is removed)",
    ]


def test_a_join_whose_token_host_is_unreachable_names_it(
    k8s_file: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """kcp1 down: the joining node's error says why it has no token; a limit of members is ok."""
    cluster = simulated(monkeypatch, tmp_path)
    cluster.unreachable.add("kcp1")
    in_the_cluster(cluster, "kgpu01")
    result = run_deploys(load_cluster(k8s_file), "kgpu01,kgpu02")
    assert list(result.hosts) == ["kgpu01", "kgpu02"]
    assert result.hosts["kgpu01"].ok
    error = result.hosts["kgpu02"].error or ""
    assert error.startswith("no join token: kcp1 (the first control plane, in this run for the token only): ")
    assert "unreachable over SSH" in error
    assert run_deploys(load_cluster(k8s_file), "kgpu01").ok
