"""The sed escaping at its caller: the pod network's CIDR reaches flannel's manifest through the
CNI add-on's command (``gpuforge.deploy.layers.k8s_addons.cni_addon``), run here whole in a real
shell (``curl``, ``sha256sum`` and ``kubectl`` stubbed, the download folder moved under the test)
against a manifest holding flannel's ``net-conf.json``; the manifest ``kubectl`` is handed holds
exactly the value.

The review found the sed escaping caught only by its unit test. The spec's type refuses any
``pod_cidr`` that is not a CIDR (the first wall: tested below); the value is then put into the
spec past that type, as a mutation of the type would let it through, so that the second wall (the
escaping at the sink) is tested through its caller: ``&`` (the match), ``\\`` (escapes), ``#``
(the delimiter) and a line break (ends the command: refused).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import yaml

from gpuforge.deploy.layers.k8s_addons import cni_addon
from gpuforge.spec import SpecError, load_spec, parse_spec
from gpuforge.spec.model import Spec
from tests import yaml_text
from tests.conftest import REPO
from tests.converge.test_k8s_ha_endpoint import FLANNELD

DOWNLOADS = "/var/lib/gpuforge/downloads"
#: ``net-conf.json`` in kube-flannel.yml's ConfigMap, as flannel's README and manifests show it, and
#: flanneld's container (the spec pins flannel to an interface: a second sed adds ``--iface``).
MANIFEST = (
    """\
  net-conf.json: |
    {
      "Network": "10.244.0.0/16",
      "Backend": {
        "Type": "vxlan"
      }
    }
"""
    + FLANNELD
)
#: What the add-on makes of it, but for the network.
PINNED = MANIFEST.replace("- --kube-subnet-mgr\n", "- --kube-subnet-mgr\n        - --iface=ens1f0\n")
STUBS = {
    "curl": 'while [ $# -gt 1 ]; do [ "$1" = -o ] && out=$2; shift; done; cat "$GPUFORGE_TEST_MANIFEST" > "$out"\n',
    "sha256sum": "cat >/dev/null; exit 0\n",
    "kubectl": 'while [ $# -gt 0 ]; do [ "$1" = -f ] && cp "$2" "$GPUFORGE_TEST_APPLIED"; shift; done\n',
}


def _spec() -> Spec:
    return load_spec(REPO / "inventories" / "k8s-gpu-operator.yaml")


def _with_pod_cidr(spec: Spec, value: str) -> Spec:
    """``spec`` with ``kubernetes.pod_cidr`` set past its type (as a mutation of the type would)."""
    assert spec.kubernetes is not None
    return spec.model_copy(update={"kubernetes": spec.kubernetes.model_copy(update={"pod_cidr": value})})


def _applied(tmp_path: Path, spec: Spec) -> str:
    """The manifest ``kubectl apply`` is handed after the add-on's command ran in ``/bin/sh``."""
    command = cni_addon(spec).command
    assert command is not None and DOWNLOADS in command
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    for name, body in STUBS.items():
        (bindir / name).write_text("#!/bin/sh\n" + body)
        (bindir / name).chmod(0o755)
    (tmp_path / "upstream.yml").write_text(MANIFEST)
    env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}",
           "GPUFORGE_TEST_MANIFEST": str(tmp_path / "upstream.yml"),
           "GPUFORGE_TEST_APPLIED": str(tmp_path / "applied.yml")}  # fmt: skip
    run = command.replace(DOWNLOADS, str(tmp_path / "downloads"))
    cp = subprocess.run(["/bin/sh", "-c", run], capture_output=True, text=True, env=env, timeout=30)
    assert cp.returncode == 0, cp.stderr
    return (tmp_path / "applied.yml").read_text()


def test_an_ordinary_pod_cidr_lands_in_the_manifest(tmp_path: Path) -> None:
    applied = _applied(tmp_path, _with_pod_cidr(_spec(), "10.32.0.0/12"))
    assert applied == PINNED.replace("10.244.0.0/16", "10.32.0.0/12")


@pytest.mark.parametrize(
    "value",
    ["10.0.0.0/8&x", "10.0.0.0/8#x", "10.0.0.0/8\\1\\n", "a&b#c\\d\\&e", "&", "#", "\\"],
    ids=["match", "delimiter", "backslashes", "all", "amp", "hash", "backslash"],
)
def test_sed_metacharacters_reach_the_manifest_literally(tmp_path: Path, value: str) -> None:
    applied = _applied(tmp_path, _with_pod_cidr(_spec(), value))
    assert applied == PINNED.replace('"Network": "10.244.0.0/16"', f'"Network": "{value}"')


def test_a_line_break_is_refused_at_the_sink(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="sed replacement"):
        cni_addon(_with_pod_cidr(_spec(), "10.0.0.0/8\nw written-by-sed"))


@pytest.mark.parametrize("value", ["10.0.0.0/8&x", "10.0.0.0/8#x", "10.0.0.0/8\nw x", "10.244.0.0/16\\"])
def test_the_spec_refuses_them_first_naming_the_field(value: str) -> None:
    data = yaml.safe_load((REPO / "inventories" / "k8s-gpu-operator.yaml").read_text())
    data["kubernetes"]["pod_cidr"] = value
    with pytest.raises(SpecError) as err:
        parse_spec(yaml_text.dump(data))
    assert "kubernetes.pod_cidr" in err.value.format()
