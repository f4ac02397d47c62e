"""The chart add-ons beside the queues and the GPU Operator's upgrade: KubeRay (CRDs from its pinned chart,
then helm), Kubeflow Trainer (helm, from its OCI chart) and the GPU Operator upgrade as NVIDIA's guide
orders it (CRDs from the pinned chart, ``helm upgrade``, then the driver upgrade controller watched until
every GPU node reports ``upgrade-done``).

Facts in, exact steps out; the commands run for real in ``sh`` with real ``tar``, ``sha256sum`` and
``mktemp``, a stand-in ``helm`` that serves a chart archive built here, and the stand-in ``kubectl`` of
``stub_kube.py``. The plan of a GPU Operator upgrade (v25.10.1 -> v26.7.0, driver 580 -> 595, the
operator managing the driver) is a golden file.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import subprocess
import tarfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuforge.deploy.converge import LayerFacts
from gpuforge.deploy.layers.k8s_addons import STAMP_DIR, addons, addons_layer
from gpuforge.spec import resolve_nodes
from gpuforge.spec.load import parse_spec
from tests import yaml_text
from tests.conftest import REPO
from tests.converge.stub_kube import StubKube

K8S = REPO / "inventories" / "k8s-gpu-operator.yaml"
GOLDEN = Path(__file__).parent / "fixtures" / "k8s_day2" / "plan_gpu_operator_upgrade.json"
HELM = "/usr/local/bin/helm"
CHARTS = ("gpu-operator-v25.10.1.tgz", "gpu-operator-v26.7.0.tgz", "kueue-v0.19.2-manifests.yaml",
          "kuberay-operator-1.7.0.tgz", "kubeflow-trainer-2.3.0.tgz")  # fmt: skip


def archive(top: str, files: dict[str, str]) -> bytes:
    """A chart archive as ``helm package`` lays it out: ``<chart>/<path>`` (the same bytes every time)."""
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb", mtime=0) as gz, tarfile.open(fileobj=gz, mode="w") as tar:
        for path, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"{top}/{path}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


#: Made-up chart archives with the layout of the real ones (their CRD folders, a Chart.yaml).
ARCHIVES = {
    "gpu-operator-v26.7.0.tgz": archive("gpu-operator", {
        "Chart.yaml": "name: gpu-operator\n",
        "crds/nvidia.com_clusterpolicies.yaml": "kind: CustomResourceDefinition # clusterpolicies v26.7.0\n",
        "crds/nvidia.com_nvidiadrivers.yaml": "kind: CustomResourceDefinition # nvidiadrivers v26.7.0\n",
        "charts/node-feature-discovery/crds/nfd-api-crds.yaml": "kind: CustomResourceDefinition # nfd\n",
    }),
    "kuberay-operator-1.7.0.tgz": archive("kuberay-operator", {
        "Chart.yaml": "name: kuberay-operator\n",
        "crds/ray.io_rayclusters.yaml": "kind: CustomResourceDefinition # rayclusters v1.7.0\n",
        "crds/ray.io_rayjobs.yaml": "kind: CustomResourceDefinition # rayjobs v1.7.0\n",
    }),
    "kubeflow-trainer-2.3.0.tgz": archive("kubeflow-trainer", {"Chart.yaml": "name: kubeflow-trainer\n"}),
}  # fmt: skip


def pins() -> dict[str, str]:
    return {n: hashlib.sha256(ARCHIVES.get(n, n.encode())).hexdigest() for n in CHARTS}


def data(**gpu_operator: Any) -> dict[str, Any]:
    d = yaml.safe_load(K8S.read_text())
    d.setdefault("sources", {})["artifact_sha256"] = pins()
    d["kubernetes"]["gpu_operator"].update(gpu_operator)
    return d


def load(d: dict[str, Any]) -> Any:
    return parse_spec(yaml_text.dump(d), "k8s.yaml", base_dir=K8S.parent)


def by_name(spec: Any) -> dict[str, Any]:
    return {a.name: a for a in addons(spec)}


def plan(spec: Any, facts: dict[str, str | None]) -> list[Any]:
    layer = addons_layer(spec, next(n for n in resolve_nodes(spec) if n.name == "kcp1"))
    assert layer.after is not None
    return list(layer.after(LayerFacts(contents=facts), set()))


def history(revision: int) -> str:
    """``helm history --max 1 -o json`` of a deployed release (helm v3.16.3 cmd/helm/history.go's shape)."""
    entry = {"revision": revision, "updated": "2026-11-20T10:15:13Z", "status": "deployed", "chart": "c",
             "app_version": "v", "description": "Upgrade complete"}  # fmt: skip
    return json.dumps([entry], separators=(",", ":"))


def applied(spec: Any, revision: int = 3) -> dict[str, str | None]:
    """What kcp1 reads after a run that applied every add-on of ``spec``: the stamps and live releases."""
    facts: dict[str, str | None] = {}
    for a in addons(spec):
        facts[a.stamp] = a.digest + (f" revision:{revision}" if a.release else "") + "\n"
        if a.release is not None:
            facts[a.release.key] = f"rc=0\n{history(revision)}\n"
    return facts


# --------------------------------------------------------------------------- order and sources


def test_the_frameworks_come_after_the_operator_and_before_kueue() -> None:
    assert list(by_name(load(data()))) == [
        "cni", "helm", "gpu-operator", "kuberay", "trainer", "queue-controller", "queue-config", "queues",
        "node-labels",
    ]  # fmt: skip
    cpu_only = data()
    cpu_only["node_groups"] = [g for g in cpu_only["node_groups"] if g["name"] in ("cp", "mon")]
    cpu_only["kubernetes"]["batch_queue"] = {"kind": "none"}
    assert list(by_name(load(cpu_only))) == ["cni", "helm", "kuberay", "trainer"]  # helm for the charts alone


def test_kuberay_takes_its_crds_from_the_checked_chart_then_helm() -> None:
    command = by_name(load(data()))["kuberay"].command or ""
    pull = (
        "/usr/local/bin/helm pull kuberay-operator --repo https://ray-project.github.io/kuberay-helm/ --version 1.7.0"
    )
    crds = 'kubectl apply --server-side --force-conflicts -f "$d/kuberay-operator/crds/"'
    upgrade = ("/usr/local/bin/helm upgrade --install kuberay-operator /var/lib/gpuforge/downloads/"
               "kuberay-operator-1.7.0.tgz --namespace kuberay-system --create-namespace --version 1.7.0 "
               "-f /etc/gpuforge/k8s/kuberay-values.yaml --wait --timeout 15m")  # fmt: skip
    assert command.index(pull) < command.index("sha256sum -c") < command.index(crds) < command.index(upgrade)


def test_trainer_is_pulled_from_its_oci_chart() -> None:
    command = by_name(load(data()))["trainer"].command or ""
    assert "/usr/local/bin/helm pull oci://ghcr.io/kubeflow/charts/kubeflow-trainer --version 2.3.0 " in command
    assert "--repo" not in command and "kubectl apply" not in command  # its CRDs are chart templates
    assert command.endswith("-f /etc/gpuforge/k8s/trainer-values.yaml --wait --timeout 15m")


def test_an_unpinned_chart_is_reported_and_a_cited_digest_needs_no_pin() -> None:
    d = data()
    d["sources"]["artifact_sha256"] = {k: v for k, v in pins().items() if not k.startswith("kuberay")}
    kuberay = by_name(load(d))["kuberay"]
    assert kuberay.command is None and "kuberay-operator-1.7.0.tgz" in (kuberay.reason or "")
    d["kubernetes"]["frameworks"]["kuberay"]["version"] = "1.4.2"  # in the cited index snapshot
    command = by_name(load(d))["kuberay"].command or ""
    assert "echo '4a36c3c08dd799d3384f50f3744183dd7c89cf4f1540ea93450acaacf557562b  " in command


def test_a_framework_release_changed_by_hand_is_installed_again() -> None:
    spec = load(data())
    facts = applied(spec)
    assert plan(spec, facts) == []
    trainer = next(a for a in addons(spec) if a.name == "trainer")
    assert trainer.release is not None
    facts[trainer.release.key] = f"rc=0\n{history(5)}\n"
    (step,) = plan(spec, facts)
    assert step.summary.endswith("release kubeflow-trainer is at revision 5, gpuforge applied revision 3")


# --------------------------------------------------------------------------- the GPU Operator upgrade


def operator_upgrade() -> tuple[Any, Any]:
    old = load(data(driver="operator") | {"versions": {**data()["versions"], "gpu_operator": "v25.10.1",
               "driver": {"version": "580.95.05", "flavor": "open", "source": "nvidia"}}})  # fmt: skip
    return old, load(data(driver="operator"))


def test_the_plan_of_a_gpu_operator_upgrade_is_the_golden_one() -> None:
    """Every add-on applied at v25.10.1 with driver 580.95.05; the spec moves to v26.7.0 and 595.91.07: the
    operator's CRDs from the new chart, helm upgrade, then the wait for the driver upgrade controller."""
    old, new = operator_upgrade()
    steps = [{"kind": s.kind.value, "summary": s.summary, "command": s.command} for s in plan(new, applied(old))]
    if os.environ.get("GPUFORGE_UPDATE_GOLDEN"):
        GOLDEN.write_text(json.dumps(steps, indent=1) + "\n")
    assert steps == json.loads(GOLDEN.read_text())
    assert [s["summary"].split(" (")[0] for s in steps] == [
        "apply GPU Operator v26.7.0",
        "apply the GPU driver 595.91.07 on every GPU node",
    ]
    operator = steps[0]["command"]
    order = ["sha256sum -c", "tar -xzf", 'kubectl apply -f "$d/gpu-operator/crds/"', "helm upgrade --install"]
    assert [operator.index(x) for x in order] == sorted(operator.index(x) for x in order)
    assert "--disable-openapi-validation" in operator  # the chart's own CRD hook still runs (option 2's flag)


def test_no_wait_without_an_operator_managed_driver_or_with_auto_upgrade_off() -> None:
    assert "gpu-driver-upgrade" not in by_name(load(data()))  # the example's host driver
    off = load(data(driver="operator", driver_upgrade={"auto_upgrade": False}))
    assert "gpu-driver-upgrade" not in by_name(off)
    assert "gpu-driver-upgrade" not in by_name(load(data(driver="operator", driver_upgrade={"wait_minutes": 0})))


# --------------------------------------------------------------------------- through a real shell

FAKE_HELM = """#!/bin/sh
# pull <chart|oci ref> [--repo URL] --version V --destination DIR: the archive $CHARTS/<name>-<V>.tgz;
# upgrade ...: logged; history ...: revision 4
echo "helm $*" >> "$LOG"
case "$1" in
pull) ref=$2; shift 2; while [ $# -gt 0 ]; do case "$1" in --version) v=$2;; --destination) d=$2;; esac; shift; done
      name=${ref##*/}; mkdir -p "$d" && cp "$CHARTS/$name-$v.tgz" "$d/" ;;
history) echo '[{"revision":4,"status":"deployed"}]' ;;
esac
"""


@pytest.fixture
def node(tmp_path: Path) -> Any:
    """A shell with the stand-in helm and kubectl on PATH, ``sleep`` instant; gpuforge's paths moved
    under ``tmp_path``; returns run(command, **kube_state) -> (CompletedProcess, StubKube)."""
    charts, bin_dir = tmp_path / "charts", tmp_path / "bin"
    charts.mkdir()
    bin_dir.mkdir()
    for name, blob in ARCHIVES.items():
        (charts / name).write_bytes(blob)
    (bin_dir / "helm").write_text(FAKE_HELM)
    (bin_dir / "sleep").write_text("#!/bin/sh\nexit 0\n")
    for tool in ("helm", "sleep"):
        (bin_dir / tool).chmod(0o755)
    kube = StubKube(tmp_path / "kube", "kcp1", ["kgpu01", "kgpu02"])

    def run(command: str) -> subprocess.CompletedProcess[str]:
        moved = command.replace(HELM, str(bin_dir / "helm")).replace("/var/lib/gpuforge", str(tmp_path / "var"))
        env = {**os.environ, "PATH": f"{kube.bin}:{bin_dir}:{os.environ['PATH']}", "STUB_KUBE": str(kube.state),
               "LOG": f"{kube.state}.log", "CHARTS": str(charts)}  # fmt: skip
        return subprocess.run(["sh", "-c", moved], env=env, capture_output=True, text=True, timeout=120)

    run.kube, run.log = kube, Path(f"{kube.state}.log")  # type: ignore[attr-defined]
    run.stamps = tmp_path / "var" / "k8s"  # type: ignore[attr-defined]
    return run


def full(a: Any) -> str:
    return f"{a.command} && {a.stamp_command()}"


def test_the_gpu_operator_upgrade_applies_the_new_crds_before_helm(node: Any) -> None:
    _, new = operator_upgrade()
    operator = by_name(new)["gpu-operator"]
    cp = node(full(operator))
    assert cp.returncode == 0, cp.stderr
    applied_crds = [(name, kind) for name, kind, _ in node.kube.read()["applied"]]
    assert applied_crds == [("nvidia.com_clusterpolicies.yaml", "client-side"), ("nvidia.com_nvidiadrivers.yaml",
                            "client-side"), ("nfd-api-crds.yaml", "client-side")]  # fmt: skip
    assert "v26.7.0" in node.kube.read()["applied"][0][2]  # the new chart's CRDs
    calls = [" ".join(line.split()[:2]) for line in node.log.read_text().splitlines()]  # helm's and kubectl's
    assert calls == ["helm pull", "kubectl apply", "helm upgrade", "helm history"]
    assert (node.stamps / "gpu-operator.applied").read_text().strip() == f"{operator.digest} revision:4"


def test_a_changed_chart_is_never_used_for_its_crds(node: Any, tmp_path: Path) -> None:
    _, new = operator_upgrade()
    (tmp_path / "charts" / "gpu-operator-v26.7.0.tgz").write_bytes(ARCHIVES["kuberay-operator-1.7.0.tgz"])
    cp = node(full(by_name(new)["gpu-operator"]))
    assert cp.returncode != 0 and "is not the file of sha256" in cp.stderr
    assert "applied" not in node.kube.read() and not (node.stamps / "gpu-operator.applied").exists()


def test_kuberay_crds_then_helm_through_a_shell(node: Any) -> None:
    kuberay = by_name(load(data()))["kuberay"]
    cp = node(full(kuberay))
    assert cp.returncode == 0, cp.stderr
    assert [(n, k) for n, k, _ in node.kube.read()["applied"]] == [
        ("ray.io_rayclusters.yaml", "server-side"), ("ray.io_rayjobs.yaml", "server-side")]  # fmt: skip
    calls = [" ".join(line.split()[:2]) for line in node.log.read_text().splitlines()]
    assert calls == ["helm pull", "kubectl apply", "helm upgrade", "helm history"]


def wait_command(**upgrade: Any) -> str:
    spec = load(data(driver="operator", driver_upgrade={"wait_minutes": 2, **upgrade}))
    return full(by_name(spec)["gpu-driver-upgrade"])


NEW_IMAGES = ["nvcr.io/nvidia/driver:595.91.07-ubuntu22.04"] * 2
OLD_IMAGES = ["nvcr.io/nvidia/driver:580.95.05-ubuntu22.04"] * 2


def test_the_wait_ends_when_every_gpu_node_is_upgraded(node: Any) -> None:
    """Right after helm the nodes still read upgrade-done on the old driver: that is not the end."""
    states = [[["kgpu01", "upgrade-done"], ["kgpu02", "upgrade-done"]],
              [["kgpu01", "pod-restart-required"], ["kgpu02", "upgrade-required"]],
              [["kgpu01", "upgrade-done"], ["kgpu02", "validation-required"]],
              [["kgpu01", "upgrade-done"], ["kgpu02", "upgrade-done"]]]  # fmt: skip
    images = [OLD_IMAGES, [NEW_IMAGES[0], OLD_IMAGES[1]], [NEW_IMAGES[0], OLD_IMAGES[1]], NEW_IMAGES]
    node.kube.update(lambda d: d.update(upgrade_states=states, driver_images=images))
    cp = node(wait_command())
    assert cp.returncode == 0, cp.stderr
    assert "driver 595.91.07 on every GPU node (upgrade-done)" in cp.stdout
    reads = node.log.read_text().count("get node -l nvidia.com/gpu.present")
    assert reads == 4 and (node.stamps / "gpu-driver-upgrade.applied").is_file()


def test_a_failed_node_fails_the_wait_at_once_naming_nvidias_recovery(node: Any) -> None:
    states = [[["kgpu01", "upgrade-done"], ["kgpu02", "upgrade-failed"]]]
    node.kube.update(lambda d: d.update(upgrade_states=states, driver_images=[NEW_IMAGES]))
    cp = node(wait_command())
    assert cp.returncode == 1 and "the driver upgrade failed on kgpu02" in cp.stderr
    assert "kubectl label node <node> nvidia.com/gpu-driver-upgrade-state=upgrade-required --overwrite" in cp.stderr
    assert not (node.stamps / "gpu-driver-upgrade.applied").exists()


def test_the_wait_is_bounded(node: Any) -> None:
    states = [[["kgpu01", "upgrade-done"], ["kgpu02", "drain-required"]]]
    node.kube.update(lambda d: d.update(upgrade_states=states, driver_images=[NEW_IMAGES]))
    cp = node(wait_command())  # 2 minutes: 4 reads 30 s apart
    assert cp.returncode == 1 and "has not finished after 2 minutes: kgpu02" in cp.stderr
    assert node.log.read_text().count("get node -l") == 4
    assert not (node.stamps / "gpu-driver-upgrade.applied").exists()


def test_the_stamps_of_the_charts_live_in_the_stamp_dir() -> None:
    assert all(a.stamp.startswith(f"{STAMP_DIR}/") for a in addons(load(data(driver="operator"))))
    assert {a.name for a in addons(load(data(driver="operator")))} >= {"gpu-driver-upgrade", "kuberay", "trainer"}
