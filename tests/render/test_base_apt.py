"""The base layer's apt drop-ins: the site proxy, and no translated descriptions unless asked for."""

from __future__ import annotations

from pathlib import Path

import yaml

from gpuforge.render.base import APT_LANGUAGES, base_files
from gpuforge.spec import load_spec, parse_spec
from gpuforge.spec.model import OsFamily
from gpuforge.spec.nodes import resolve_nodes
from tests import yaml_text

INVENTORIES = Path(__file__).resolve().parents[2] / "inventories"


def _files(text: str) -> dict[str, dict[str, bytes]]:
    spec = parse_spec(text)
    return {n.name: {f.path: f.data for f in base_files(spec, n)} for n in resolve_nodes(spec)}


def _lab(**sources: object) -> str:
    doc = yaml.safe_load((INVENTORIES / "lab.yaml").read_text())
    doc["sources"].update(sources)
    return yaml_text.dump(doc)


def test_every_debian_node_gets_no_translations_by_default() -> None:
    files = _files(_lab())
    assert set(files) == {"node1", "node2", "node3"}
    for node, got in files.items():
        assert got[APT_LANGUAGES] == (
            b'// Managed by gpuforge: edit the cluster spec, not this file.\nAcquire::Languages "none";\n'
        ), node


def test_apt_translations_true_leaves_apt_to_its_own_languages() -> None:
    assert all(APT_LANGUAGES not in got for got in _files(_lab(apt_translations=True)).values())


def test_rhel_nodes_get_no_apt_files() -> None:
    spec = load_spec(INVENTORIES / "lab.yaml")
    # The lab spec's nodes as RHEL 9 ones (copied, not re-validated: only the OS matters here).
    rhel = spec.model_copy(update={"cluster": spec.cluster.model_copy(update={"os": OsFamily.RHEL9})})
    for node in resolve_nodes(rhel):
        assert node.os.is_deb is False
        assert not [f.path for f in base_files(rhel, node) if f.path.startswith("/etc/apt/")], node.name
