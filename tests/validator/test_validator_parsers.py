"""nodelocal's small stdlib parsers agree with the gpuforge facts' parsers on every facts fixture.

nodelocal.py cannot import gpuforge (it runs on nodes), so it carries its own parsers and the
same commands; these tests pin both to the facts' fixtures (real captures where available).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuforge.probes import files, mig, nvidia, slurm, systemd
from gpuforge.validator.node import base, checks_gpu, drain, framework, parsers, probing

from .vhelpers import FACT_FIXTURES


def fixtures(fact: str) -> list[Path]:
    found = [p for p in sorted(FACT_FIXTURES.glob("*/*.json")) if json.loads(p.read_text())["fact"] == fact]
    assert found, f"no fixture for {fact}"
    return found


def load(path: Path) -> tuple[list[str], dict]:
    data = json.loads(path.read_text())
    return data["output"], data


def ids(paths: list[Path]) -> list[str]:
    return [f"{p.parent.name}/{p.stem}" for p in paths]


# the probes send the facts' exact commands --------------------------------------------------


@pytest.mark.parametrize(
    ("probe", "fact"),
    [
        ("lspci", "nvidia.NvidiaPciDevices"),
        ("smi", "nvidia.NvidiaSmiGpus"),
        ("remapped", "nvidia.NvidiaRemappedRows"),
        ("nvlink", "nvidia.NvlinkStatus"),
        ("xid", "nvidia.XidErrors"),
        ("modules", "nvidia.KernelModules"),
        ("driver", "nvidia.NvidiaDriverVersion"),
        ("mig_profiles", "mig.MigGpuInstanceProfiles"),
        ("topo", "nvidia.GpuTopology"),
    ],
)
def test_probe_commands_are_the_facts_commands(probe: str, fact: str) -> None:
    _, data = load(fixtures(fact)[0])
    sh = probing.PROBES[probe].sh
    assert sh is not None
    assert sh({}) == data["command"]


def test_units_and_mig_commands_match_facts() -> None:
    _, data = load(fixtures("systemd.UnitStates")[0])
    names = data["args"][0]
    cmd = data["command"].replace(" ".join(names), "X")
    ours = f"echo '__units=X'; systemctl show -p {','.join(systemd.UNIT_PROPERTIES)} X 2>&1; echo \"__rc=$?\""
    assert ours == cmd
    _, data = load(fixtures("mig.MigPartedAssert")[0])
    file, name = data["args"]
    assert probing.PROBES["mig"].sh({"mig": {"file": file, "config": name}}) == data["command"]  # type: ignore[misc]


# parsers ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", fixtures("nvidia.NvidiaPciDevices"), ids=ids(fixtures("nvidia.NvidiaPciDevices")))
def test_lspci(path: Path) -> None:
    out, _ = load(path)
    want = nvidia.parse_lspci_nvidia(out)
    got = parsers.parse_lspci(out)
    assert got.available == want["lspci_available"]
    assert [a for a, _, _ in got.gpus] == [d["address"] for d in want["gpus"]]
    assert [d for _, d, _ in got.gpus] == [d["device_id"] for d in want["gpus"]]
    assert got.nvswitches == [d["address"] for d in want["nvswitches"]]


@pytest.mark.parametrize("path", fixtures("nvidia.NvidiaSmiGpus"), ids=ids(fixtures("nvidia.NvidiaSmiGpus")))
def test_gpu_query(path: Path) -> None:
    out, _ = load(path)
    want = nvidia.parse_gpu_query(out)
    got = parsers.parse_gpu_query(out)
    assert got.available == want["available"] and got.rc == want["rc"]
    assert (got.error is None) == (want["error"] is None)
    if want["error"] and want["available"]:
        assert got.error == want["error"]
    assert len(got.gpus) == len(want["gpus"])
    for g, w in zip(got.gpus, want["gpus"], strict=True):
        assert (g.index, g.name, g.address) == (w["index"], w["name"], w["pci_address"])
        assert (g.driver_version, g.persistence, g.ecc_uncorrected) == (
            w["driver_version"], w["persistence_mode"], w["ecc_uncorrected_volatile"])  # fmt: skip
        assert (g.width_current, g.width_max, g.mig_current) == (
            w["pcie_link_width_current"], w["pcie_link_width_max"], w["mig_mode_current"])  # fmt: skip


@pytest.mark.parametrize("path", fixtures("nvidia.NvidiaRemappedRows"), ids=ids(fixtures("nvidia.NvidiaRemappedRows")))
def test_remapped_rows(path: Path) -> None:
    out, _ = load(path)
    want = nvidia.parse_remapped_rows(out)
    m, rows = parsers.parse_remapped_rows(out)
    assert m.rc == want["rc"] and (m.missing is None) == want["available"]
    assert [(r.address, r.pending, r.failure, r.uncorrectable) for r in rows] == [
        (w["pci_address"], w["pending"], w["failure"], w["uncorrectable"]) for w in want["gpus"]
    ]


@pytest.mark.parametrize("path", fixtures("nvidia.NvlinkStatus"), ids=ids(fixtures("nvidia.NvlinkStatus")))
def test_nvlink(path: Path) -> None:
    out, _ = load(path)
    want = nvidia.parse_nvlink_status(out)
    m, gpus = parsers.parse_nvlink(out)
    assert m.rc == want["rc"]
    assert sum(len(g.inactive) for g in gpus) == want["inactive_links"]
    assert [g.index for g in gpus] == [w["index"] for w in want["gpus"]]
    assert [g.active for g in gpus] == [sum(link["active"] for link in w["links"]) for w in want["gpus"]]


@pytest.mark.parametrize("path", fixtures("nvidia.XidErrors"), ids=ids(fixtures("nvidia.XidErrors")))
def test_xid(path: Path) -> None:
    out, _ = load(path)
    want = nvidia.parse_xid_errors(out)
    source, events = parsers.parse_xid(out)
    assert source == want["source"]
    assert [(c, a) for c, a, _ in events] == [(e["code"], e["pci_address"]) for e in want["events"]]
    assert sorted({c for c, _, _ in events if c in nvidia.SERIOUS_XIDS}) == want["serious_codes"]


@pytest.mark.parametrize("path", fixtures("nvidia.KernelModules"), ids=ids(fixtures("nvidia.KernelModules")))
def test_modules(path: Path) -> None:
    out, _ = load(path)
    want = nvidia.parse_proc_modules(out)
    readable, names = parsers.parse_modules(out)
    assert readable == want["readable"] and names == set(want["modules"])


@pytest.mark.parametrize(
    "path", fixtures("nvidia.NvidiaDriverVersion"), ids=ids(fixtures("nvidia.NvidiaDriverVersion"))
)
def test_driver_version(path: Path) -> None:
    out, _ = load(path)
    want = nvidia.parse_driver_version(out)
    assert parsers.parse_driver(out) == (want["loaded"], want["version"])


@pytest.mark.parametrize("path", fixtures("systemd.UnitStates"), ids=ids(fixtures("systemd.UnitStates")))
def test_units(path: Path) -> None:
    out, _ = load(path)
    want = systemd.parse_systemctl_show(out)["units"]
    got = parsers.parse_units(out)
    assert {k: (v or {}).get("ActiveState") for k, v in want.items() if v} == {
        k: v.get("ActiveState") for k, v in got.items()
    }
    assert {k: (v or {}).get("LoadState") for k, v in want.items() if v} == {
        k: v.get("LoadState") for k, v in got.items()
    }


@pytest.mark.parametrize("path", fixtures("files.FileDigests"), ids=ids(fixtures("files.FileDigests")))
def test_file_records(path: Path) -> None:
    out, _ = load(path)
    want = files.parse_file_digests(out)
    # nodelocal reads one path per probe: split the multi-path output at each record
    records: list[list[str]] = []
    for line in out:
        if line.startswith(("__file=", "__missing=")):
            records.append([])
        if records:
            records[-1].append(line)
    for record in records:
        got = parsers.parse_file(record)
        name = record[0].split("=", 1)[1]
        w = want[name]
        if w is None:
            assert got is None
            continue
        assert got is not None
        assert (got["mode"], got["owner"], got["group"]) == (w["mode"], w["owner"], w["group"])
        assert got.get("sha256") == w["sha256"]


def test_file_lines_round_trip(tmp_path: Path) -> None:
    p = tmp_path / "key"
    p.write_bytes(b"secret")
    p.chmod(0o400)
    got = parsers.parse_file(probing.file_lines(str(p)))
    assert got is not None and got["mode"] == "0400" and got["type"] == "regular file"
    assert got["sha256"] == "2bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b"
    assert files.parse_file_digests(probing.file_lines(str(p)))[str(p)]["mode"] == "0400"  # the facts read it too
    assert parsers.parse_file(probing.file_lines(str(tmp_path / "nope"))) is None


@pytest.mark.parametrize("path", fixtures("mig.MigPartedAssert"), ids=ids(fixtures("mig.MigPartedAssert")))
def test_mig_assert(path: Path) -> None:
    out, _ = load(path)
    want = mig.parse_mig_parted_assert(out)
    cfg = {"gpu": {"count": 1}, "mig": {"config": "x", "file": "/f"}}
    status, message = checks_gpu._mig(_Ctx(cfg, {"mig": out}))
    assert (status == base.PASS) == bool(want["applied"])
    if want["message"] and not want["applied"]:
        assert want["message"] in message


@pytest.mark.parametrize(
    "path",
    [p for p in fixtures("dcgm.DcgmiDiag") if json.loads(p.read_text())["args"][1:] == [True]],
    ids=lambda p: p.stem,
)
def test_dcgm_diag_json(path: Path) -> None:
    from gpuforge.probes import dcgm

    out, _ = load(path)
    want = dcgm.parse_dcgmi_diag(out)
    overall, failing, _ = parsers.parse_diag_json(out)
    assert overall == want["overall"]
    assert sorted(failing) == sorted(t["name"] for t in want["tests"] if t["status"] == "fail")


@pytest.mark.parametrize("path", fixtures("dcgm.DcgmExporterMetrics"), ids=ids(fixtures("dcgm.DcgmExporterMetrics")))
def test_metric_names(path: Path) -> None:
    from gpuforge.probes import dcgm

    out, _ = load(path)
    want = {name for name, m in dcgm.parse_exporter_metrics(out)["metrics"].items() if m["samples"]}
    assert parsers.metric_names(parsers.split_markers(out).lines) == want


def test_scontrol_state_and_reason() -> None:
    path = FACT_FIXTURES / "slurm" / "scontrol_nodes_oneline_reason_with_equals.json"
    out, _ = load(path)
    want = slurm.parse_scontrol_nodes(out)["nodes"]
    for line in out:
        if line.startswith("NodeName="):
            name = line.split()[0].split("=", 1)[1]
            assert drain.parse_node_state(line) == (want[name].get("State"), want[name].get("Reason"))


def test_smi_exit_codes_match_the_facts_table() -> None:
    assert probing.NVIDIA_SMI_EXIT_CODES == nvidia.NVIDIA_SMI_EXIT_CODES
    for rc in (2, 9, 15, 77):
        assert parsers.explain_smi_rc(rc) == nvidia.explain_nvidia_smi_rc(rc)


class _Ctx(framework.NodeContext):
    def _run(self, key: str) -> list[str]:
        raise AssertionError(key)


# gpu.mig_profiles on real nvidia-smi mig -lgip output ------------------------------------------

NVL = fixtures("mig.MigGpuInstanceProfiles")[0]
MIG_OFF = next(p for p in fixtures("mig.MigGpuInstanceProfiles") if "no_mig" in p.stem)


def _profiles(out: list[str], wanted: list[str]) -> tuple[str, str]:
    cfg = {"gpu": {"count": 1}, "mig": {"config": "inference", "file": "/f", "profiles": wanted}}
    return checks_gpu._mig_profiles(_Ctx(cfg, {"mig_profiles": out}))


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

TOPO = {p.stem: p for p in fixtures("nvidia.GpuTopology")}


def _topology(out: list[str]) -> tuple[str, str]:
    return checks_gpu._topology(_Ctx({"gpu": {"count": 8, "nvswitch": True}}, {"topo": out}))


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


def test_topology_is_only_checked_on_nvswitch_nodes() -> None:
    assert checks_gpu.gate_nvswitch({"gpu": {"count": 8, "nvswitch": False}}) == "the spec declares no NVSwitch"
    assert checks_gpu.gate_nvswitch({"gpu": {"count": 8, "nvswitch": True}}) is None
