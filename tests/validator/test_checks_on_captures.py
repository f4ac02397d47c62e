"""Node checks on real captures (the facts' fixtures): MIG layout and profiles, GPU topology."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuforge.validator.node import base, checks_gpu
from gpuforge.validator.node.framework import NodeContext

from .vhelpers import FACT_FIXTURES, StrictContext


def fixtures(reading: str) -> list[Path]:
    found = [p for p in sorted(FACT_FIXTURES.glob("*/*.json")) if json.loads(p.read_text())["reading"] == reading]
    assert found, f"no fixture for {reading}"
    return found


def load(path: Path) -> tuple[list[str], dict]:
    data = json.loads(path.read_text())
    return data["output"], data


def ctx(cfg: dict, outputs: dict[str, list[str]]) -> NodeContext:
    return StrictContext(cfg, outputs)


@pytest.mark.parametrize("path", fixtures("mig.parted_assert"), ids=lambda p: p.stem)
def test_mig_assert_on_every_capture(path: Path) -> None:
    out, data = load(path)
    want = data["fact_value"]
    cfg = {"gpu": {"count": 1}, "mig": {"config": "x", "file": "/f"}}
    status, message = checks_gpu._mig(ctx(cfg, {"mig": out}))
    assert (status == base.PASS) == bool(want["applied"])
    if want["message"] and not want["applied"]:
        assert want["message"] in message


# gpu.mig_profiles on real nvidia-smi mig -lgip output ------------------------------------------

NVL = fixtures("mig.profiles")[0]
MIG_OFF = next(p for p in fixtures("mig.profiles") if "no_mig" in p.stem)


def _profiles(out: list[str], wanted: list[str]) -> tuple[str, str]:
    cfg = {"gpu": {"count": 1}, "mig": {"config": "inference", "file": "/f", "profiles": wanted}}
    return checks_gpu._mig_profiles(ctx(cfg, {"mig_profiles": out}))


def test_mig_profiles_of_the_layout_are_offered() -> None:
    assert NVL.stem == "mig_lgip_h100_nvl_94gb"
    out, _ = load(NVL)
    assert _profiles(out, ["1g.12gb", "3g.47gb"]) == (
        base.PASS,
        "every profile of layout inference is offered (1g.12gb, 3g.47gb)",
    )


def test_a_layout_for_80_gb_cards_on_a_94_gb_h100_is_named() -> None:
    out, _ = load(NVL)
    assert _profiles(out, ["1g.10gb", "1g.12gb", "3g.40gb"]) == (
        base.FAIL,
        "layout inference names 1g.10gb, 3g.40gb, which these GPUs do not offer (they offer 1g.12gb, "
        "1g.12gb+me, 1g.24gb, 2g.24gb, 3g.47gb, 4g.47gb, 7g.94gb)",
    )


def test_mig_off_is_left_to_gpu_mig_and_a_missing_or_failing_nvidia_smi_fails() -> None:
    out, _ = load(MIG_OFF)
    assert _profiles(out, ["1g.10gb"]) == (
        base.SKIP,
        "No MIG-enabled devices found. (MIG mode is off: gpu.mig says why)",
    )
    assert _profiles(["__missing=nvidia-smi"], ["1g.10gb"]) == (base.FAIL, "nvidia-smi not found")
    assert _profiles(["__rc=9"], ["1g.10gb"]) == (
        base.FAIL,
        "nvidia-smi exit code 9: NVIDIA driver is not loaded (nvidia-smi could not communicate with the NVIDIA driver)",
    )


# gpu.topology on real nvidia-smi topo -m output -------------------------------------------------

TOPO = {p.stem: p for p in fixtures("nvidia.topology")}


def _topology(out: list[str]) -> tuple[str, str]:
    return checks_gpu._topology(ctx({"gpu": {"count": 8, "nvswitch": True}}, {"topo": out}))


@pytest.mark.parametrize("name", ["topo_hgx_h100_nv18_all_pairs", "topo_hgx_h100_twelve_nics_two_numa"])
def test_every_pair_over_nvlink_passes(name: str) -> None:
    out, _ = load(TOPO[name])
    assert _topology(out) == (base.PASS, "all 28 GPU pairs joined by NVLink (NV18)")


def test_a_pair_over_pcie_fails_naming_it() -> None:
    out, _ = load(TOPO["topo_gpu3_gpu5_over_pcie"])
    assert _topology(out) == (base.FAIL, "1 of 28 GPU pairs not joined by NVLink: GPU3-GPU5 (SYS)")


def test_topology_without_nvidia_smi_or_driver_fails() -> None:
    assert _topology(["__missing=nvidia-smi"]) == (base.FAIL, "nvidia-smi not found")
    status, message = _topology(["__rc=9"])
    assert status == base.FAIL and message.startswith("nvidia-smi exit code 9: NVIDIA driver is not loaded")
    status, message = _topology(["__timeout=8"])
    assert (status, message) == (base.FAIL, "nvidia-smi did not answer within 8 s (hung driver or GPU)")


def test_topology_is_only_checked_on_nvswitch_nodes() -> None:
    assert checks_gpu.gate_nvswitch({"gpu": {"count": 8, "nvswitch": False}}) == "the spec declares no NVSwitch"
    assert checks_gpu.gate_nvswitch({"gpu": {"count": 8, "nvswitch": True}}) is None
