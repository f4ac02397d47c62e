"""The NVIDIA layers as data: spec + node + facts in, planned steps out (pyinfra style).

Each ``fixtures/<case>.json`` holds::

    {"description": "...",
     "spec": "inventories/slurm-h100.yaml" or inline YAML,
     "patch": {... deep-merged into the spec; node_groups patched by group name ...},
     "bundle": {"artifacts/<file>": "<text>"},   # optional offline bundle ($BUNDLE in patch)
     "node": "gpu001",
     "layer": "nvidia-driver",                   # one of gpuforge.deploy.layers.nvidia.LAYER_NAMES
     "host": {NvidiaHost fields: gpus, nvswitches, loaded_driver, packages},
     "facts": {LayerFacts fields: packages, files, units, contents},
     "steps": [{"kind": ..., "summary": "<substring>", "command": ["<substring>", ...],
                "no_command": true, "path": "<upload path>"}, ...],
     "changed": [...], "records": {"reboot_required": [...substrings], "pyxis_rebuilt": bool}}

A file or content fact ``"=rendered"`` stands for exactly what the layer would write, so a
converged node is described without copying checksums of templates into fixtures.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuforge.deploy import nvidia_needs
from gpuforge.deploy.converge import LayerFacts, Step, plan_layer, sha256
from gpuforge.deploy.layers import nvidia as nv
from gpuforge.deploy.layers.nvidia.common import pyxis_rebuilt
from gpuforge.probes.nvidia_host import HostFacts
from gpuforge.spec import parse_spec, resolve_nodes
from tests import yaml_text
from tests.helpers import jammy_data, write_bundle_manifest

REPO = Path(__file__).resolve().parents[2]
FIXTURES = sorted((Path(__file__).parent / "fixtures").glob("*.json"))
RENDERED = "=rendered"


def merge(base: Any, patch: Any) -> Any:
    """Deep merge; a dict patching a list of named mappings merges into the items by name."""
    if isinstance(base, dict) and isinstance(patch, dict):
        out = dict(base)
        for k, v in patch.items():
            out[k] = merge(base[k], v) if k in base else v
        return out
    if isinstance(base, list) and isinstance(patch, dict) and all(isinstance(i, dict) and "name" in i for i in base):
        names = [i["name"] for i in base]
        missing = sorted(set(patch) - set(names))
        assert not missing, f"patch names unknown items {missing}"
        return [merge(i, patch[i["name"]]) if i["name"] in patch else i for i in base]
    return patch


def _replace(value: Any, old: str, new: str) -> Any:
    if isinstance(value, str):
        return value.replace(old, new)
    if isinstance(value, dict):
        return {k: _replace(v, old, new) for k, v in value.items()}
    if isinstance(value, list):
        return [_replace(v, old, new) for v in value]
    return value


def load_case(path: Path, tmp_path: Path) -> dict[str, Any]:
    case: dict[str, Any] = json.loads(path.read_text())
    text = case["spec"]
    if "\n" not in text:
        text = (REPO / text).read_text()
    data = yaml.safe_load(text)
    bundle = tmp_path / "bundle"
    for rel, content in case.get("bundle", {}).items():
        target = bundle / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)
    if case.get("bundle"):
        write_bundle_manifest(bundle)  # a bundle lists its files (what `gpuforge bundle` writes)
    data = merge(data, _replace(case.get("patch", {}), "$BUNDLE", str(bundle)))
    case["spec_obj"] = parse_spec(yaml_text.dump(jammy_data(data)))
    return case


def layer_for(case: dict[str, Any]) -> tuple[nvidia_needs.Ctx, Any]:
    s = case["spec_obj"]
    node = next((n for n in resolve_nodes(s) if n.name == case["node"]), None)
    assert node is not None, f"no node {case['node']} in the spec"
    ctx = nvidia_needs.Ctx.build(s, node, HostFacts.from_dict(case.get("host", {})), name=f"test-{case['node']}")
    layers = dict((layer.name, layer) for _, layer in nv.nvidia_layers(ctx))
    assert case["layer"] in layers, f"unknown layer {case['layer']}: {sorted(layers)}"
    return ctx, layers[case["layer"]]


def facts_for(case: dict[str, Any], layer: Any) -> LayerFacts:
    raw = case.get("facts", {})
    wanted = {f.path: f for f in layer.all_files}
    files: dict[str, Any] = {}
    for path, value in raw.get("files", {}).items():
        if value == RENDERED:
            f = wanted[path]
            value = {"type": "file", "sha256": sha256(f.data), "mode": f.mode, "owner": f.owner, "group": f.group}
        files[path] = value
    contents = {p: (wanted[p].data.decode() if v == RENDERED else v) for p, v in raw.get("contents", {}).items()}
    return LayerFacts(
        packages=dict(raw.get("packages", {})),
        files=files,
        units=dict(raw.get("units", {})),
        accounts=dict(raw.get("accounts", {})),
        contents=contents,
    )


def describe(steps: list[Step]) -> str:
    return "\n".join(f"  [{s.kind}] {s.summary}" + (f"\n      $ {s.command}" if s.command else "") for s in steps)


def check_step(i: int, step: Step, want: dict[str, Any], all_steps: list[Step]) -> None:
    where = f"step {i}:\n{describe(all_steps)}"
    assert step.kind == want["kind"], where
    if "summary" in want:
        assert want["summary"] in step.summary, where
    at = 0  # the parts appear in the command in the order the fixture lists them
    for part in want.get("command", []):
        assert step.command is not None and part in step.command, f"{part!r} not in command of {where}"
        found = step.command.find(part, at)
        assert found >= 0, f"{part!r} is in the command of {where}\nbut not after the part before it"
        at = found + len(part)
    for part in want.get("not_in_command", []):
        assert step.command is None or part not in step.command, f"{part!r} in command of {where}"
    if want.get("no_command"):
        assert step.command is None and step.upload is None, where
    if "path" in want:
        assert step.upload is not None and step.upload.path == want["path"], where
    for part in want.get("content", []):
        assert step.upload is not None and part in step.upload.data.decode(), f"{part!r} not in upload of {where}"


@pytest.mark.parametrize("path", FIXTURES, ids=[p.stem for p in FIXTURES])
def test_plan_fixture(path: Path, tmp_path: Path) -> None:
    case = load_case(path, tmp_path)
    assert case.get("description", "").strip(), "every fixture says what it shows"
    ctx, layer = layer_for(case)
    steps, changed = plan_layer(layer, facts_for(case, layer))
    expected = case["steps"]
    assert len(steps) == len(expected), f"{len(steps)} steps, expected {len(expected)}:\n{describe(steps)}"
    for i, (step, want) in enumerate(zip(steps, expected, strict=True)):
        check_step(i, step, want, steps)
    if "changed" in case:
        assert sorted(changed) == sorted(case["changed"])
    records = case.get("records", {})
    if "reboot_required" in records:
        reasons = ctx.run.reboot_required(ctx.name)
        assert len(reasons) == len(records["reboot_required"]), reasons
        for want_text, have in zip(records["reboot_required"], reasons, strict=True):
            assert want_text in have
    if "pyxis_rebuilt" in records:
        ctx.run.record_changed(ctx.name, "pyxis", changed)
        assert pyxis_rebuilt(ctx.run, ctx.name) is records["pyxis_rebuilt"]


def test_fixture_count() -> None:
    assert len(FIXTURES) >= 25


def test_every_layer_has_fixtures() -> None:
    covered = {json.loads(p.read_text())["layer"] for p in FIXTURES}
    assert covered == set(nv.LAYER_NAMES)


def test_rhel9_epel_is_set_up_before_enroot_and_pyxis(tmp_path: Path) -> None:
    """The layers run in order, so EPEL 9 is there before dnf needs 'parallel' (enroot) and 'slurm-devel' (pyxis)."""
    case = load_case(Path(__file__).parent / "fixtures" / "repos_rhel9_login_epel_for_enroot_and_pyxis.json", tmp_path)
    ctx, _ = layer_for(case)
    order: list[tuple[str, str]] = []
    for _, layer in nv.nvidia_layers(ctx):
        steps, _ = plan_layer(layer, LayerFacts())
        order += [(layer.name, s.command or "") for s in steps]
    index = {
        "epel": next(i for i, (n, c) in enumerate(order) if n == "nvidia-repos" and "epel-release" in c),
        "enroot": next(i for i, (n, c) in enumerate(order) if n == "enroot" and "dnf -y install" in c),
        "pyxis": next(i for i, (n, c) in enumerate(order) if n == "pyxis" and "slurm-devel" in c),
    }
    assert index["epel"] < index["enroot"] < index["pyxis"], order
    assert not any(n in ("nvidia-driver", "nvidia-container-toolkit", "nvidia-dcgm") for n, _ in order)  # no GPU
