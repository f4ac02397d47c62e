"""The GPU/MIG catalog (gpuforge/spec/gpus.py) against NVIDIA mig-parted's config-default.yaml.

The upstream file is read from ``../shared/reference/upstream/mig-parted/`` beside the
repository (see its SOURCES.md: mig-parted v0.15.0, deployments/systemd/config-default.yaml).

How a profile counts as "valid for a model" in that file:

* An entry with a ``device-filter`` applies to exactly the PCI device IDs it lists, so a
  profile in such an entry is valid for a model when the filter names one of the model's
  IDs (``0x<device>10DE``).
* Most configs (``all-3g.40gb`` ...) have no device-filter. mig-parted groups them under
  YAML comments naming GPU models, but comments are not part of the parsed YAML and they
  are not reliable: the comment stands above the first config of a run and does not repeat
  (``all-2g.35gb`` .. ``all-7g.141gb`` follow ``all-1g.35gb``, whose only comments are
  inside it). So a profile that is only in unfiltered entries is accepted when it appears
  in any unfiltered entry of the file. A profile that is only in filtered entries, none of
  them for the model, is an error. The model's memory is checked by name instead: a
  model's full-GPU profile is ``7g.<memory_gb>gb``.

Max counts: where upstream has the ``all-<profile>`` config (``+me`` written ``.me``), the
count it asks for on the model's devices (the filtered entry for the model's IDs, else the
unfiltered entry) is the most that fit on one GPU, and must equal ``MigProfile.max_count``.
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuforge.spec.gpus import COMPUTE_SLICES, GPU_MODELS, MEMORY_SLICES, GpuModel, gpu_model
from tests.helpers import needs_upstream

REPO = Path(__file__).resolve().parents[2]
CONFIG_DEFAULT = REPO / ".." / "shared" / "reference" / "upstream" / "mig-parted" / "config-default.yaml"

MIG_MODELS = [m for m in GPU_MODELS.values() if m.supports_mig]


def _filters(entry: dict[str, Any]) -> set[str] | None:
    value = entry.get("device-filter")
    if value is None:
        return None
    return {v.upper() for v in ([value] if isinstance(value, str) else value)}


def _ids(model: GpuModel) -> set[str]:
    return {f.upper() for f in model.mig_device_filter}


@pytest.fixture(scope="module")
def mig_configs() -> dict[str, list[dict[str, Any]]]:
    assert CONFIG_DEFAULT.is_file(), f"upstream reference data is missing: {CONFIG_DEFAULT} (part of the test bed)"
    doc = yaml.safe_load(CONFIG_DEFAULT.read_text(encoding="utf-8"))
    assert doc["version"] == "v1"
    return doc["mig-configs"]


@pytest.fixture(scope="module")
def profiles_upstream(mig_configs: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """profile -> {"unfiltered": bool, "filters": set of device IDs of filtered entries}."""
    out: dict[str, dict[str, Any]] = defaultdict(lambda: {"unfiltered": False, "filters": set()})
    for entries in mig_configs.values():
        for entry in entries:
            for profile in entry.get("mig-devices") or {}:
                filt = _filters(entry)
                if filt is None:
                    out[profile]["unfiltered"] = True
                else:
                    out[profile]["filters"] |= filt
    return dict(out)


# --------------------------------------------------------------------------- catalog itself


def test_catalog_names_and_lookup() -> None:
    for name, model in GPU_MODELS.items():
        assert model.name == name
        assert gpu_model(name) is model
    with pytest.raises(KeyError):
        gpu_model("H100")


def test_device_filter_format() -> None:
    for model in GPU_MODELS.values():
        assert model.pci_device_ids
        for f in model.mig_device_filter:
            assert re.fullmatch(r"0x[0-9A-F]{4}10DE", f), f


def test_pci_ids_belong_to_one_model() -> None:
    owners: dict[str, str] = {}
    for model in GPU_MODELS.values():
        for dev in model.pci_device_ids:
            assert dev.upper() not in owners, f"{dev} is in {owners.get(dev.upper())} and {model.name}"
            owners[dev.upper()] = model.name


def test_l40s_has_no_mig() -> None:
    assert not GPU_MODELS["L40S"].supports_mig
    assert GPU_MODELS["L40S"].profile("1g.10gb") is None


@pytest.mark.parametrize("model", MIG_MODELS, ids=lambda m: m.name)
def test_profiles_are_consistent(model: GpuModel) -> None:
    names = [p.name for p in model.mig_profiles]
    assert len(names) == len(set(names))
    for p in model.mig_profiles:
        m = re.fullmatch(r"(\d)g\.(\d+)gb(\+me)?", p.name)
        assert m, p.name
        assert int(m[1]) == p.compute, p.name
        assert 1 <= p.compute <= COMPUTE_SLICES and 1 <= p.memory <= MEMORY_SLICES
        # max_count instances must fit the slice budget of one GPU.
        assert p.compute * p.max_count <= COMPUTE_SLICES, p.name
        assert p.memory * p.max_count <= MEMORY_SLICES, p.name
        # memory grows with the memory slices of the profile.
        assert int(m[2]) <= model.memory_gb
    full = [p for p in model.mig_profiles if p.compute == COMPUTE_SLICES]
    assert [p.name for p in full] == [f"7g.{model.memory_gb}gb"]
    assert full[0].memory == MEMORY_SLICES


# --------------------------------------------------------------------------- against upstream


@needs_upstream
@pytest.mark.parametrize("model", MIG_MODELS, ids=lambda m: m.name)
def test_profiles_are_in_mig_parted(model: GpuModel, profiles_upstream: dict[str, dict[str, Any]]) -> None:
    ids = _ids(model)
    problems = []
    for p in model.mig_profiles:
        seen = profiles_upstream.get(p.name)
        if seen is None:
            problems.append(f"{p.name}: not in config-default.yaml at all")
        elif seen["filters"] & ids:
            continue  # in an entry for one of the model's device IDs
        elif seen["unfiltered"]:
            continue  # in an entry for any device (see module docstring)
        else:
            problems.append(f"{p.name}: only in entries for other devices {sorted(seen['filters'])}")
    assert not problems, f"{model.name}: " + "; ".join(problems)


@needs_upstream
@pytest.mark.parametrize("model", MIG_MODELS, ids=lambda m: m.name)
def test_device_ids_are_known_to_mig_parted(model: GpuModel, mig_configs: dict[str, list[dict[str, Any]]]) -> None:
    """Every MIG-capable device ID has an all-balanced entry upstream."""
    filters: set[str] = set()
    for entry in mig_configs["all-balanced"]:
        filters |= _filters(entry) or set()
    assert _ids(model) <= filters, sorted(_ids(model) - filters)


def _upstream_count(model: GpuModel, profile: str, entries: list[dict[str, Any]]) -> int | None:
    """The count an all-<profile> config asks for on this model's GPUs (None: no entry applies)."""
    ids = _ids(model)
    filtered = [e for e in entries if (_filters(e) or set()) & ids]
    unfiltered = [e for e in entries if _filters(e) is None]
    for entry in filtered or unfiltered:
        devices = entry.get("mig-devices") or {}
        if set(devices) == {profile}:
            return int(devices[profile])
    return None


@needs_upstream
@pytest.mark.parametrize("model", MIG_MODELS, ids=lambda m: m.name)
def test_max_counts_match_all_profile_configs(model: GpuModel, mig_configs: dict[str, list[dict[str, Any]]]) -> None:
    checked = 0
    wrong = []
    for p in model.mig_profiles:
        entries = mig_configs.get("all-" + p.name.replace("+", "."))
        if entries is None:
            continue
        count = _upstream_count(model, p.name, entries)
        if count is None:
            continue
        checked += 1
        if count != p.max_count:
            wrong.append(f"{p.name}: gpus.py max_count {p.max_count}, upstream all-{p.name} asks for {count}")
    assert not wrong, f"{model.name}: " + "; ".join(wrong)
    assert checked >= 5, f"{model.name}: only {checked} profiles have an all-<profile> config upstream"


@needs_upstream
@pytest.mark.parametrize("model", MIG_MODELS, ids=lambda m: m.name)
def test_all_balanced_fits_the_slice_budget(model: GpuModel, mig_configs: dict[str, list[dict[str, Any]]]) -> None:
    """Upstream's all-balanced layout for the model uses only its profiles and fits one GPU."""
    ids = _ids(model)
    entries = [e for e in mig_configs["all-balanced"] if (_filters(e) or set()) & ids]
    assert entries, f"no all-balanced entry for {model.name}"
    for entry in entries:
        compute = memory = 0
        for name, count in entry["mig-devices"].items():
            profile = model.profile(name)
            assert profile is not None, f"all-balanced uses {name}, which {model.name} does not list"
            assert count <= profile.max_count
            compute += profile.compute * count
            memory += profile.memory * count
        assert compute <= COMPUTE_SLICES and memory <= MEMORY_SLICES, (compute, memory)


def test_missing_upstream_is_a_failure_not_a_skip(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Without ../shared/reference/upstream a test that needs it fails; it is never skipped."""
    import tests.helpers as helpers

    monkeypatch.setattr(helpers, "UPSTREAM", tmp_path / "no-such-upstream")
    with pytest.raises(pytest.fail.Exception, match="upstream reference data is missing"):
        helpers.require_upstream()
    assert helpers.needs_upstream.name == "usefixtures" and helpers.needs_upstream.args == ("upstream_data",)
