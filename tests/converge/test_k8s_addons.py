"""Cluster add-ons on the first control plane (pod network, helm, GPU Operator, queue controller, queues,
node labels): facts (stamps, the live GPU Operator release) in, exact steps out; applied again only when
their inputs change, or (the GPU Operator) when its release is not the one gpuforge installed."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuforge.deploy.converge import LayerFacts, StepKind
from gpuforge.deploy.facts.layer import CommandRead, layer_state_command, parse_layer_state
from gpuforge.deploy.layers.k8s_addons import HELM, STAMP_DIR, addons, addons_layer
from gpuforge.render import kubernetes as k8s
from gpuforge.spec import resolve_nodes
from gpuforge.spec.load import parse_spec
from tests import yaml_text
from tests.conftest import REPO

K8S = REPO / "inventories" / "k8s-gpu-operator.yaml"
ADMIN = "KUBECONFIG=/etc/kubernetes/admin.conf"
OPERATOR_STAMP = f"{STAMP_DIR}/gpu-operator.applied"
RELEASE = "helm-release:gpu-operator/gpu-operator"
HISTORY = f"{ADMIN} /usr/local/bin/helm history gpu-operator --namespace gpu-operator --max 1 -o json"
READ = f'out=$({HISTORY} 2>&1); echo "rc=$?"; printf \'%s\\n\' "$out"'
NFD = "gpu-operator/charts/node-feature-discovery/crds"
NOT_FOUND = "Error: release: not found"  # helm's ErrReleaseNotFound (k8s_upstream SOURCES helm-release-not-found)
UNREACHABLE = (
    'Error: Kubernetes cluster unreachable: Get "https://10.0.0.10:6443/version": '
    "dial tcp 10.0.0.10:6443: connect: connection refused"
)


def history(revision: int, status: str = "deployed") -> str:
    """``helm history gpu-operator --max 1 -o json`` output, shaped as helm v3.16.3 encodes it
    (cmd/helm/history.go: a one-line JSON list of releaseInfo {revision, updated, status, chart,
    app_version, description}). Written from that source, not recorded from a live cluster."""
    entry = {
        "revision": revision,
        "updated": "2026-07-20T10:15:13.123456789Z",
        "status": status,
        "chart": "gpu-operator-v26.7.0",
        "app_version": "v26.7.0",
        "description": "Upgrade complete" if status == "deployed" else 'Upgrade "gpu-operator" failed',
    }
    return json.dumps([entry], separators=(",", ":")) + "\n"


def present(revision: int, status: str = "deployed") -> str:
    """The fact read's output when helm lists the release: exit status 0, then the history."""
    return f"rc=0\n{history(revision, status)}"


def failed(line: str, rc: int = 1) -> str:
    """The fact read's output when helm fails (its error on its combined output)."""
    return f"rc={rc}\n{line}\n"


#: sha256 pins of the release files of the example spec that no upstream publishes a sha256 for
#: (``artifact_digests.UNPUBLISHED``): made up for the plans here; flannel and helm are in the cited table.
PINS = {
    "gpu-operator-v26.7.0.tgz": hashlib.sha256(b"test chart gpu-operator v26.7.0").hexdigest(),
    "kueue-v0.19.2-manifests.yaml": hashlib.sha256(b"test kueue v0.19.2 manifests").hexdigest(),
}


def load(mutate: Any = None, base_dir: Path | None = None, pins: dict[str, str] | None = None) -> Any:
    """The example without its frameworks (their add-ons: tests/converge/test_k8s_frameworks.py)."""
    data = yaml.safe_load(K8S.read_text())
    data["kubernetes"].pop("frameworks", None)
    data.setdefault("sources", {})["artifact_sha256"] = dict(PINS if pins is None else pins)
    if mutate:
        mutate(data)
    return parse_spec(yaml_text.dump(data), "k8s.yaml", base_dir=base_dir or K8S.parent)


def plan(spec: Any, stamps: dict[str, str | None] | None = None) -> list[Any]:
    first = next(n for n in resolve_nodes(spec) if n.name == "kcp1")
    layer = addons_layer(spec, first)
    assert layer.after is not None
    return list(layer.after(LayerFacts(contents=dict(stamps or {})), set()))


def applied(spec: Any, revision: int = 3) -> dict[str, str | None]:
    """What a node reads after a run that applied every add-on of ``spec`` (the GPU Operator at
    release ``revision``): the stamps, and the live release."""
    facts: dict[str, str | None] = {
        a.stamp: a.digest + (f" revision:{revision}" if a.release else "") + "\n" for a in addons(spec)
    }
    facts[RELEASE] = present(revision)
    return facts


def test_a_fresh_cluster_gets_every_add_on_in_order() -> None:
    steps = plan(load())
    assert [s.summary for s in steps] == [
        "apply pod network: flannel v0.28.9 (pod CIDR 10.244.0.0/16)",
        "apply helm 4.2.4 in /usr/local/bin/helm",
        "apply GPU Operator v26.7.0 (its CRDs, then helm upgrade --install, values "
        "/etc/gpuforge/k8s/gpu-operator-values.yaml)",
        "apply kueue v0.19.2",
        "apply Kueue configuration (manageJobsWithoutQueueName: true)",
        "apply the tenants' queues (2, /etc/gpuforge/k8s/kueue.yaml)",
        "apply labels on 11 node(s) (gpuforge.dev/node-group, nvidia.com/mig.config)",
    ]
    assert all(s.kind is StepKind.INSTALL for s in steps)
    operator = steps[2].command
    values_sha = hashlib.sha256(k8s.gpu_operator_values_yaml(load()).encode()).hexdigest()[:16]
    chart = "/var/lib/gpuforge/downloads/gpu-operator-v26.7.0.tgz"
    sha = PINS["gpu-operator-v26.7.0.tgz"]
    refused = f"gpuforge: gpu-operator-v26.7.0.tgz is not the file of sha256 {sha}: removed, not used"
    assert operator == (
        f"install -d -m 0755 /var/lib/gpuforge/downloads && rm -rf {chart}.part.d && "
        "/usr/local/bin/helm pull gpu-operator --repo https://helm.ngc.nvidia.com/nvidia --version v26.7.0 "
        f"--destination {chart}.part.d && {{ echo '{sha}  {chart}.part.d/gpu-operator-v26.7.0.tgz' | "
        f"sha256sum -c --quiet - || {{ echo '{refused}' >&2; rm -rf {chart}.part.d; false; }}; }} && "
        f"mv {chart}.part.d/gpu-operator-v26.7.0.tgz {chart} && rm -rf {chart}.part.d && "
        f'{{ d=$(mktemp -d) && tar -xzf {chart} -C "$d" gpu-operator/crds {NFD} && '
        f'{ADMIN} kubectl apply -f "$d/gpu-operator/crds/" -f "$d/{NFD}/"; '
        'rc=$?; rm -rf "$d"; [ "$rc" -eq 0 ]; } && '
        f"{ADMIN} /usr/local/bin/helm upgrade --install gpu-operator {chart} --namespace gpu-operator "
        "--create-namespace --version v26.7.0 --disable-openapi-validation "
        "-f /etc/gpuforge/k8s/gpu-operator-values.yaml "
        "--wait --timeout 15m && "
        f"rev=$({HISTORY} | sed -n 's/^\\[{{\"revision\":\\([0-9][0-9]*\\)[,}}].*/\\1/p') && "
        f'test -n "$rev" && install -d -m 0755 {STAMP_DIR} && '
        f"echo 'v26.7.0 values:{values_sha}'\" revision:$rev\" > {STAMP_DIR}/gpu-operator.applied"
    )
    assert steps[3].command is not None and steps[3].command.endswith(
        f"{ADMIN} kubectl wait deploy/kueue-controller-manager -n kueue-system --for=condition=available "
        f"--timeout=5m && install -d -m 0755 {STAMP_DIR} && "
        f"echo 'kueue v0.19.2 {PINS['kueue-v0.19.2-manifests.yaml']}' > {STAMP_DIR}/queue-controller.applied"
    )
    assert "https://github.com/kubernetes-sigs/kueue/releases/download/v0.19.2/manifests.yaml" in steps[3].command
    for step in steps[:4]:  # every fetched file is checked before it is moved where the next command takes it
        command = step.command or ""
        assert (
            command.index("sha256sum -c")
            < command.index(" && mv ")
            < command.index(ADMIN if step is not steps[1] else "tar -xzf")
        )
    labels = steps[6].command or ""
    kinf01 = "kinf01 --overwrite gpuforge.dev/node-group=infer nvidia.com/mig.config=all-1g"
    assert f"{ADMIN} kubectl label node {kinf01}" in labels
    assert f"{ADMIN} kubectl label node kmon1 --overwrite gpuforge.dev/node-group=mon" in labels  # a Kueue flavor each


def test_nothing_is_applied_again_without_a_change() -> None:
    """Same digests, and the GPU Operator release deployed at the revision its stamp recorded."""
    spec = load()
    assert plan(spec, applied(spec)) == []


def test_the_live_release_is_read_in_the_same_round_trip_as_the_stamps() -> None:
    spec = load()
    layer = addons_layer(spec, next(n for n in resolve_nodes(spec) if n.name == "kcp1"))
    reads = [p for p in layer.read_paths if isinstance(p, CommandRead)]
    assert [(str(r), r.command) for r in reads] == [(RELEASE, READ)]
    assert [p for p in layer.read_paths if not isinstance(p, CommandRead)] == [a.stamp for a in addons(spec)]
    command = layer_state_command([], [], [], [], layer.read_paths)
    assert command.count("__section=") == 1  # one fact, one command
    assert f'echo "{RELEASE}=$({{ {READ}; }} 2>/dev/null | base64 -w0)"' in command


def operator_only(steps: list[Any]) -> Any:
    (step,) = steps
    assert step.summary.startswith("apply GPU Operator v26.7.0")
    assert "helm upgrade --install gpu-operator" in (step.command or "")
    return step


def test_an_uninstalled_release_is_installed_again_although_its_stamp_is_current() -> None:
    """``helm uninstall`` removes the release: helm history fails with release: not found."""
    spec = load()
    facts = applied(spec)
    facts[RELEASE] = failed(NOT_FOUND)
    step = operator_only(plan(spec, facts))
    assert step.summary.endswith(": release gpu-operator not found in namespace gpu-operator")


def test_a_release_changed_by_hand_is_upgraded_again() -> None:
    """A rollback or a manual upgrade makes a new revision: not the one gpuforge recorded."""
    spec = load()
    facts = applied(spec, revision=3)
    facts[RELEASE] = present(5)
    step = operator_only(plan(spec, facts))
    assert step.summary.endswith(": release gpu-operator is at revision 5, gpuforge applied revision 3")


@pytest.mark.parametrize("status", ["failed", "pending-upgrade", "uninstalled", "superseded", "unknown"])
def test_a_release_that_is_not_deployed_is_upgraded_again(status: str) -> None:
    spec = load()
    facts = applied(spec, revision=3)
    facts[RELEASE] = present(3, status)
    step = operator_only(plan(spec, facts))
    assert step.summary.endswith(f": release gpu-operator is {status} (revision 3)")


def test_a_stamp_without_a_revision_runs_helm_once_more() -> None:
    """A stamp that records no release revision (an older gpuforge wrote it) cannot be compared."""
    spec = load()
    facts = applied(spec)
    facts[OPERATOR_STAMP] = next(a.digest for a in addons(spec) if a.name == "gpu-operator") + "\n"
    step = operator_only(plan(spec, facts))
    assert step.summary.endswith("/etc/gpuforge/k8s/gpu-operator-values.yaml)")  # no drift reason: stamp differs


def unreadable_warning(line: str) -> dict[str, Any]:
    return {
        "kind": StepKind.WARNING,
        "summary": "GPU Operator v26.7.0 (its CRDs, then helm upgrade --install, values "
        "/etc/gpuforge/k8s/gpu-operator-values.yaml): release gpu-operator in namespace gpu-operator could not be "
        "read and was not compared with the stamp: " + line,
    }


@pytest.mark.parametrize(
    ("output", "line"),
    [
        (failed(UNREACHABLE), UNREACHABLE),
        (failed("bash: /usr/local/bin/helm: No such file or directory", 127), "bash: /usr/local/bin/helm: No such "
         "file or directory"),
        (failed("", 124), "helm history exited 124"),
        ("rc=0\nnot json\n", "helm history printed no revision"),
        (None, "no exit status from helm history"),
        (history(3), "no exit status from helm history"),
    ],
    ids=["unreachable", "no-helm", "timeout", "not-json", "no-output", "no-rc"],
)  # fmt: skip
def test_an_unreadable_release_with_a_current_stamp_is_a_warning_and_no_helm(output: str | None, line: str) -> None:
    """API server down, helm missing, RBAC, a timeout: not a missing release, so no helm upgrade."""
    spec = load()
    facts = applied(spec)
    facts[RELEASE] = output
    assert [s.as_dict() for s in plan(spec, facts)] == [unreadable_warning(line)]


def test_an_unreadable_release_with_a_changed_digest_runs_helm() -> None:
    """The stamp differs: helm runs as for any change (its own error shows if the API is down)."""
    before = load()
    after = load(lambda d: d["kubernetes"]["gpu_operator"].update(time_slicing_replicas=4))
    facts = applied(before)
    facts[RELEASE] = failed(UNREACHABLE)
    (step,) = plan(after, facts)
    operator = next(a for a in addons(after) if a.name == "gpu-operator")
    assert step.as_dict() == {
        "kind": StepKind.INSTALL,
        "summary": f"apply {operator.summary}",
        "command": f"{operator.command} && {operator.stamp_command()}",
    }


def test_a_missing_release_runs_helm_and_a_present_one_at_its_revision_nothing() -> None:
    spec = load()
    operator = next(a for a in addons(spec) if a.name == "gpu-operator")
    facts = applied(spec, revision=3)
    facts[RELEASE] = failed(NOT_FOUND)
    assert [s.as_dict() for s in plan(spec, facts)] == [
        {
            "kind": StepKind.INSTALL,
            "summary": f"apply {operator.summary}: release gpu-operator not found in namespace gpu-operator",
            "command": f"{operator.command} && {operator.stamp_command()}",
        }
    ]
    facts[RELEASE] = present(3)
    assert plan(spec, facts) == []
    # helm's warnings share the output (2>&1): the history is still found
    facts[RELEASE] = "rc=0\nWARNING: Kubernetes configuration file is group-readable. This is insecure.\n" + history(3)
    assert plan(spec, facts) == []


FAKE_HELM = f"""#!/bin/sh
# history <release> --namespace <ns> --max 1 -o json: what $FAKE_HISTORY holds, else helm's error:
# the API server refused the connection ($FAKE_UNREACHABLE set) or the release does not exist
[ "$1" = history ] || exit 2
if [ -s "$FAKE_HISTORY" ]; then cat "$FAKE_HISTORY"; exit 0; fi
echo 'WARNING: Kubernetes configuration file is group-readable. This is insecure.' >&2
if [ -n "$FAKE_UNREACHABLE" ]; then echo '{UNREACHABLE}' >&2; exit 1; fi
echo '{NOT_FOUND}' >&2; exit 1
"""


def on_node(
    tmp_path: Path, command: str, history_output: str | None, helm_fails: str = "not-found"
) -> subprocess.CompletedProcess[str]:
    """Run ``command`` in a shell with a fake helm (and the stamps under ``tmp_path``); ``helm_fails``
    says how it fails without a history: ``not-found``, ``unreachable``, or ``absent`` (no helm)."""
    helm = tmp_path / "helm"
    if helm_fails != "absent":
        helm.write_text(FAKE_HELM)
        helm.chmod(0o755)
    (tmp_path / "history.json").write_text(history_output or "")
    script = command.replace(HELM, str(helm)).replace(STAMP_DIR, str(tmp_path / "k8s"))
    env = {**os.environ, "FAKE_HISTORY": str(tmp_path / "history.json")}
    if helm_fails == "unreachable":
        env["FAKE_UNREACHABLE"] = "1"
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env, check=False)


@pytest.mark.parametrize(
    ("live", "helm_fails", "read", "outcome"),
    [
        (history(3), "", present(3), []),
        (history(4), "", present(4), ["apply GPU Operator v26.7.0"]),
        (history(3, "failed"), "", present(3, "failed"), ["apply GPU Operator v26.7.0"]),
        (None, "not-found", None, ["apply GPU Operator v26.7.0"]),
        (None, "unreachable", None, [f"warning: ... {UNREACHABLE}"]),
        (None, "absent", None, None),
    ],
    ids=["same-revision", "other-revision", "failed", "missing", "unreachable", "no-helm"],
)
def test_the_fact_read_on_a_node_decides_as_the_plan_does(
    tmp_path: Path, live: str | None, helm_fails: str, read: str | None, outcome: list[str] | None
) -> None:
    """The layer's fact command, run by a shell against a fake helm, parsed by the fact's parser."""
    spec = load()
    layer = addons_layer(spec, next(n for n in resolve_nodes(spec) if n.name == "kcp1"))
    (tmp_path / "k8s").mkdir()
    for path, text in applied(spec, 3).items():
        if path.startswith(STAMP_DIR):
            (tmp_path / "k8s" / Path(path).name).write_text(text or "")
    out = on_node(tmp_path, layer_state_command([], [], [], [], layer.read_paths), live, helm_fails)
    assert out.returncode == 0, out.stderr
    facts = parse_layer_state(out.stdout.splitlines())
    facts.contents = {k.replace(str(tmp_path / "k8s"), STAMP_DIR): v for k, v in facts.contents.items()}
    if read is not None:
        assert facts.contents[RELEASE] == read
    elif helm_fails == "not-found":
        assert (facts.contents[RELEASE] or "").startswith("rc=1\n")
        assert (facts.contents[RELEASE] or "").endswith(f"\n{NOT_FOUND}\n")
    assert layer.after is not None
    steps = layer.after(facts, set())
    summaries = [
        f"warning: ... {s.summary.partition('the stamp: ')[2]}"
        if s.kind is StepKind.WARNING
        else s.summary.split(" (")[0]
        for s in steps
    ]
    if helm_fails == "absent":  # the shell's line: "bash: line 1: <path>: No such file or directory"
        (summary,) = summaries
        assert summary.startswith("warning: ... bash: ")
        assert summary.endswith(f"{tmp_path / 'helm'}: No such file or directory")
    else:
        assert summaries == outcome


def test_the_stamp_records_the_revision_helm_reports_after_the_upgrade(tmp_path: Path) -> None:
    spec = load()
    operator = next(a for a in addons(spec) if a.name == "gpu-operator")
    out = on_node(tmp_path, operator.stamp_command(), history(7))
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "k8s" / "gpu-operator.applied").read_text() == f"{operator.digest} revision:7\n"
    # read back, the same digest and revision need no helm
    facts = applied(spec)
    facts[OPERATOR_STAMP] = (tmp_path / "k8s" / "gpu-operator.applied").read_text()
    facts[RELEASE] = present(7)
    assert plan(spec, facts) == []


def test_no_revision_after_the_upgrade_fails_and_leaves_no_stamp(tmp_path: Path) -> None:
    spec = load()
    operator = next(a for a in addons(spec) if a.name == "gpu-operator")
    out = on_node(tmp_path, operator.stamp_command(), None)
    assert out.returncode != 0
    assert not (tmp_path / "k8s" / "gpu-operator.applied").exists()


def test_command_read_keys_are_plain_words() -> None:
    with pytest.raises(ValueError, match="letters, digits"):
        CommandRead('a"b', "true")
    with pytest.raises(ValueError, match="letters, digits"):
        CommandRead("a=b", "true")


def test_changed_values_run_helm_again_and_nothing_else() -> None:
    before = load()
    after = load(lambda d: d["kubernetes"]["gpu_operator"].update(time_slicing_replicas=4))
    (step,) = plan(after, applied(before))
    assert step.summary.startswith("apply GPU Operator v26.7.0")


def test_a_new_chart_version_runs_helm_again() -> None:
    before = load()
    after = load(
        pins={**PINS, "gpu-operator-v26.7.1.tgz": "1" * 64},
        mutate=lambda d: d["versions"].update(gpu_operator="v26.7.1"),
    )
    (step,) = plan(after, applied(before))
    assert "--version v26.7.1" in (step.command or "")
    assert f"echo '{'1' * 64}  /var/lib/gpuforge/downloads/gpu-operator-v26.7.1.tgz.part.d/" in (step.command or "")


def test_a_new_queue_controller_release_applies_the_queues_again() -> None:
    """A release's manifests carry their own scheduler ConfigMap (Volcano): ours must follow."""
    before = load(lambda d: d["kubernetes"]["batch_queue"].update(kind="volcano", version="v1.15.0"))
    after = load(lambda d: d["kubernetes"]["batch_queue"].update(kind="volcano", version="v1.15.1"))
    assert [s.summary.split(" (")[0] for s in plan(after, applied(before))] == [
        "apply volcano v1.15.1",
        "apply the tenants' queues",
    ]


def test_an_interrupted_add_on_is_applied_again() -> None:
    spec = load()
    stamps = applied(spec)
    del stamps[f"{STAMP_DIR}/queues.applied"]  # its command never finished: no stamp was written
    (step,) = plan(spec, stamps)
    assert step.summary.startswith("apply the tenants' queues")


def test_flannel_is_given_the_spec_pod_cidr(tmp_path: Path) -> None:
    spec = load(lambda d: d["kubernetes"].update(pod_cidr="10.32.0.0/12"))
    cni = plan(spec)[0].command or ""
    sed = next(part for part in cni.split(" && ") if part.startswith("sed "))
    # net-conf.json as flannel's kube-flannel.yml ships it (README: match the Network to the pod CIDR)
    manifest = tmp_path / "kube-flannel.yml"
    manifest.write_text('  net-conf.json: |\n    {\n      "Network": "10.244.0.0/16",\n      "Backend": {}\n    }\n')
    subprocess.run(["sh", "-c", sed.replace("/var/lib/gpuforge/downloads/kube-flannel-v0.28.9.yml", str(manifest))],
                   check=True)  # fmt: skip
    assert '"Network": "10.32.0.0/12"' in manifest.read_text()
    assert '"Network"' not in (plan(load())[0].command or "")  # the default pod CIDR needs no edit


def test_calico_takes_its_pinned_manifest() -> None:
    spec = load(
        lambda d: d["kubernetes"].update(
            cni={"plugin": "calico", "version": "v3.29.2"}, node_interface=None, api_endpoint="198.51.100.9"
        )
    )
    cni = plan(spec)[0]
    assert "https://raw.githubusercontent.com/projectcalico/calico/v3.29.2/manifests/calico.yaml" in (cni.command or "")
    assert "sed " not in (cni.command or "")  # calico reads the pod CIDR from kubeadm's configuration


def test_volcano_waits_for_its_admission_webhook() -> None:
    spec = load(lambda d: d["kubernetes"]["batch_queue"].update(kind="volcano", version="v1.15.1"))
    controller = next(s for s in plan(spec) if s.summary == "apply volcano v1.15.1")
    assert "https://raw.githubusercontent.com/volcano-sh/volcano/v1.15.1/installer/volcano-development.yaml" in (
        controller.command or ""
    )
    assert "kubectl wait deploy/volcano-admission -n volcano-system" in (controller.command or "")


def test_without_a_source_an_add_on_is_reported_and_later_ones_wait() -> None:
    def mirror(d: dict[str, Any]) -> None:
        d["sources"] = {"mode": "mirror", "apt_proxy": "http://192.0.2.1:3142"}

    steps = plan(load(mirror))
    assert [s.kind for s in steps] == [StepKind.UNAVAILABLE]
    assert "sources.mirrors.artifacts" in steps[0].summary


def test_offline_pushes_the_bundles_chart_and_manifests(tmp_path: Path) -> None:
    bundle = tmp_path / "bundle"
    (bundle / "artifacts").mkdir(parents=True)
    names = ["kube-flannel-v0.28.9.yml", "helm-v4.2.4-linux-amd64.tar.gz", "gpu-operator-v26.7.0.tgz",
             "kueue-v0.19.2-manifests.yaml"]  # fmt: skip
    files = []
    for name in names:
        (bundle / "artifacts" / name).write_bytes(name.encode())
        files.append({"path": f"artifacts/{name}", "sha256": hashlib.sha256(name.encode()).hexdigest()})
    (bundle / "manifest.json").write_text(json.dumps({"files": files}))
    pins = {f["path"].removeprefix("artifacts/"): f["sha256"] for f in files}
    offline = {"mode": "offline", "bundle_dir": str(bundle), "bundle_fingerprint": "A" * 40, "artifact_sha256": pins}
    spec = load(lambda d: d.update(sources=offline))
    steps = plan(spec)
    uploads = [s.upload.path for s in steps if s.upload is not None]
    assert uploads == [f"/var/lib/gpuforge/bundle/{n}" for n in names]
    operator = next(s for s in steps if s.summary.startswith("apply GPU Operator"))
    assert "upgrade --install gpu-operator /var/lib/gpuforge/bundle/gpu-operator-v26.7.0.tgz" in (
        operator.command or ""
    )
    assert "--repo" not in (operator.command or "")


@pytest.mark.parametrize("name", ["kcp2", "kgpu01"])
def test_only_the_first_control_plane_applies_add_ons(name: str) -> None:
    spec = load()
    assert addons_layer(spec, next(n for n in resolve_nodes(spec) if n.name == name)).is_empty


def test_no_gpu_workers_no_operator() -> None:
    def cpu_only(d: dict[str, Any]) -> None:
        d["node_groups"] = [g for g in d["node_groups"] if g["name"] in ("cp", "mon")]
        d["kubernetes"]["batch_queue"] = {"kind": "none"}

    assert [a.name for a in addons(load(cpu_only))] == ["cni"]
