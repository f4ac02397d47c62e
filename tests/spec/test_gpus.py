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

Slices: a model has ``compute_slices`` compute slices (7; the RTX PRO 6000 Blackwell has 4) and its
memory is counted in eighths (``MEMORY_SLICES``), whatever the model.

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

from gpuforge.spec.gpus import (
    ARCHITECTURES,
    COMPUTE_SLICES,
    FACTS,
    GPU_MODELS,
    MEMORY_SLICES,
    SOURCES,
    VARIANTS,
    GpuModel,
    gpu_model,
)
from gpuforge.spec.platforms import Arch
from gpuforge.spec.types import mig_profile_name
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


@pytest.mark.parametrize("name", ["L40S", "L4"])
def test_ada_models_have_no_mig(name: str) -> None:
    """MIG starts with Ampere's GA100 and is on no Ada part (MIG User Guide, Supported GPUs)."""
    model = GPU_MODELS[name]
    assert not model.supports_mig and model.mig_profiles == ()
    assert model.profile("1g.10gb") is None
    assert model.architecture == "ada"


def test_the_catalog_covers_what_sites_buy() -> None:
    assert set(GPU_MODELS) >= {
        "A100-40GB",
        "A100-80GB",
        "H100-80GB",
        "H100-94GB",
        "H200-141GB",
        "GH200-96GB",
        "GH200-144GB",
        "B200",
        "B300",
        "GB200",
        "GB300",
        "RTX-PRO-6000-BSE",
        "L40S",
        "L4",
    }
    for model in GPU_MODELS.values():
        assert re.fullmatch(r"[a-z][a-z0-9]*", model.gres_type), model.gres_type


def test_device_ids_are_four_hex_digits() -> None:
    for model in GPU_MODELS.values():
        for dev in model.pci_device_ids:
            assert re.fullmatch(r"[0-9A-F]{4}", dev), f"{model.name}: {dev!r}"


def test_every_model_has_an_architecture() -> None:
    for model in GPU_MODELS.values():
        assert model.architecture in ARCHITECTURES, (model.name, model.architecture)


#: Grace superchips: the GPU and an Arm Neoverse Grace CPU on one module, so the node is aarch64.
GRACE_MODELS = {"GH200-96GB", "GH200-144GB", "GB200", "GB300"}


def test_grace_models_run_on_aarch64_and_the_others_on_any_host() -> None:
    for model in GPU_MODELS.values():
        expected = Arch.AARCH64 if model.name in GRACE_MODELS else None
        assert model.host_arch is expected, model.name


def test_blackwell_and_grace_hopper_need_the_open_kernel_modules() -> None:
    """NVIDIA: 'For cutting-edge platforms such as NVIDIA Grace Hopper or NVIDIA Blackwell, you must use
    the open-source GPU kernel modules.' Ampere, Ada and PCIe/HGX Hopper take either flavor."""
    open_only = {"GH200-96GB", "GH200-144GB", "B200", "B300", "GB200", "GB300", "RTX-PRO-6000-BSE"}
    for model in GPU_MODELS.values():
        assert model.open_kernel_modules_only is (model.name in open_only), model.name
        grace_hopper = model.architecture == "hopper" and model.host_arch is Arch.AARCH64
        assert model.open_kernel_modules_only is (model.architecture == "blackwell" or grace_hopper), model.name


def test_sources_name_existing_citations_for_every_fact() -> None:
    used: set[str] = set()
    for model in GPU_MODELS.values():
        facts: set[str] = set()
        for entry in model.sources:
            fact, _, key = entry.partition(":")
            assert fact in FACTS and key in SOURCES, f"{model.name}: {entry!r}"
            facts.add(fact)
            used.add(key)
        needed = {"pci", "memory", "arch"}
        needed |= {"mig"} if model.supports_mig else set()
        needed |= {"host"} if model.host_arch is not None else set()
        needed |= {"open"} if model.open_kernel_modules_only else set()
        needed |= {"max"} if model.max_per_node is not None else set()
        assert needed <= facts, f"{model.name} cites nothing for {sorted(needed - facts)}"
        assert model.citations("pci"), model.name
    assert used == set(SOURCES), f"citations no model uses: {sorted(set(SOURCES) - used)}"
    for key, citation in SOURCES.items():
        assert citation.title and citation.where and citation.section, key


def test_the_spec_can_name_every_catalog_profile() -> None:
    for model in GPU_MODELS.values():
        for p in model.mig_profiles:
            assert mig_profile_name(p.name) == p.name
    for bad in ("1g.24gb+", "1g.24gb+me.", "1g.24gb--me", "1g.24gb+me.all.x", "1g.24gb+ME", "1g.24gb me"):
        with pytest.raises(ValueError, match="is not a MIG profile name"):
            mig_profile_name(bad)


@pytest.mark.parametrize("model", MIG_MODELS, ids=lambda m: m.name)
def test_profiles_are_consistent(model: GpuModel) -> None:
    names = [p.name for p in model.mig_profiles]
    assert len(names) == len(set(names))
    assert 1 <= model.compute_slices <= COMPUTE_SLICES
    for p in model.mig_profiles:
        m = re.fullmatch(r"(\d)g\.(\d+)gb(\+me|\+me\.all|\+gfx|-me)?", p.name)
        assert m, p.name
        assert int(m[1]) == p.compute, p.name
        assert p.variant == (m[3] or "") and p.variant in VARIANTS, p.name
        assert 1 <= p.compute <= model.compute_slices and 1 <= p.memory <= MEMORY_SLICES
        # max_count instances must fit the slice budget of one GPU.
        assert p.compute * p.max_count <= model.compute_slices, p.name
        assert p.memory * p.max_count <= MEMORY_SLICES, p.name
        # memory grows with the memory slices (eighths) of the profile: the GB in the name is the
        # model's memory times memory/8, rounded (1g.34gb of B300's 269: 33.6; 1g.35gb of GB300's 278: 34.75).
        assert int(m[2]) <= model.memory_gb
        assert abs(int(m[2]) - model.memory_gb * p.memory / MEMORY_SLICES) <= 1, p.name
    full = [p for p in model.mig_profiles if p.compute == model.compute_slices]
    assert [p.name for p in full if not p.variant] == [f"{model.compute_slices}g.{model.memory_gb}gb"]
    assert all(p.memory == MEMORY_SLICES for p in full)


@pytest.mark.parametrize("model", MIG_MODELS, ids=lambda m: m.name)
def test_the_shared_slice_budget_is_never_looser_than_the_model(model: GpuModel) -> None:
    """spec/gpu_rules.py checks a layout against COMPUTE_SLICES / MEMORY_SLICES. On a GPU with fewer compute
    slices (RTX PRO 6000: 4) every profile takes at least its share of compute in memory eighths, so a
    layout that fits the 8 memory eighths fits the model's compute slices too."""
    if model.compute_slices == COMPUTE_SLICES:
        return
    for p in model.mig_profiles:
        assert p.memory * model.compute_slices >= p.compute * MEMORY_SLICES, p.name


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


@needs_upstream
@pytest.mark.parametrize("model", MIG_MODELS, ids=lambda m: m.name)
def test_device_ids_are_in_mig_parted_device_filters(
    model: GpuModel, mig_configs: dict[str, list[dict[str, Any]]]
) -> None:
    """Every device ID of a MIG model is a 4-hex-digit ID that some mig-parted device-filter names."""
    filters: set[str] = set()
    for entries in mig_configs.values():
        for entry in entries:
            filters |= _filters(entry) or set()
    for dev in model.pci_device_ids:
        assert re.fullmatch(r"[0-9A-F]{4}", dev), dev
        assert f"0x{dev}10DE".upper() in filters, f"{model.name}: {dev} is in no device-filter of config-default.yaml"


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
        assert compute <= model.compute_slices and memory <= MEMORY_SLICES, (compute, memory)


def test_missing_upstream_is_a_failure_not_a_skip(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Without ../shared/reference/upstream a test that needs it fails; it is never skipped."""
    import tests.helpers as helpers

    monkeypatch.setattr(helpers, "UPSTREAM", tmp_path / "no-such-upstream")
    with pytest.raises(pytest.fail.Exception, match="upstream reference data is missing"):
        helpers.require_upstream()
    assert helpers.needs_upstream.name == "usefixtures" and helpers.needs_upstream.args == ("upstream_data",)
