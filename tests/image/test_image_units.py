"""Image build pure parts: the operation tags, layer shaping, strip rules, the record, the OCI layout."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

import pytest
import yaml

from gpuforge.deploy.converge import Account, Directory, Layer, LayerFacts, Service, Step, StepKind, plan_layer
from gpuforge.deploy.image_mode import (
    IMAGE_RECORD_PATH,
    OPERATION_TAGS,
    ImageBuild,
    ImageCompare,
    ImageTag,
    UntaggedOperation,
    compare,
    layer_digest,
    shape,
)
from gpuforge.deploy.layers.nvidia import LAYER_NAMES
from gpuforge.deploy.runstate import RunState
from gpuforge.image import bootable, oci, strip, tarball
from gpuforge.image.build import oci_labels, parse_formats
from gpuforge.image.manifest import installed_packages
from gpuforge.image.record import image_record, record_text
from gpuforge.image.scope import ImageSpecError, build_spec_data, common_files, group_nodes
from gpuforge.lab.system import LabError
from gpuforge.probes.image import parse_image_record
from gpuforge.render.files import RenderedFile
from gpuforge.spec import Spec, load_spec

REPO = Path(__file__).resolve().parents[2]
LAB_SPEC = REPO / "inventories" / "lab.yaml"


def _layer_names_in_deploys() -> set[str]:
    """Every layer name the deploys give a non-empty Layer (``Layer("name"``, ``Layer(\\n "name"``)."""
    names = set(LAYER_NAMES)
    for path in (REPO / "gpuforge" / "deploy" / "layers").rglob("*.py"):
        names |= set(re.findall(r'Layer\(\s*"([a-z0-9-]+)"', path.read_text()))
    return names


def test_every_operation_of_the_deploys_has_an_image_tag() -> None:
    missing = sorted(_layer_names_in_deploys() - set(OPERATION_TAGS))
    assert not missing, f"operations without an image tag: {missing}"


def test_an_untagged_operation_is_an_error_never_a_guess() -> None:
    with pytest.raises(UntaggedOperation):
        shape(Layer("brand-new", packages=("x",)), frozenset())
    assert shape(Layer.empty("brand-new"), frozenset()).is_empty  # empty layers need no tag


def _file(path: str, text: str, **kw: object) -> RenderedFile:
    return RenderedFile(path, text, **kw)  # type: ignore[arg-type]


def test_shape_keeps_what_every_node_shares_and_nothing_secret_or_per_node() -> None:
    shared = _file("/etc/slurm/slurm.conf", "ClusterName=x\n")
    per_node = _file("/etc/hosts", "10.0.0.2 node2\n")
    secret = _file("/etc/munge/munge.key", "k" * 32, secret=True)
    creds = _file("/etc/x.yml", "url: https://u:p@h\n", redact=lambda t: t)
    timer = _file("/etc/systemd/system/a.timer", "[Timer]\nRandomizedDelaySec=3\n")
    common = frozenset((f.path, f.sha256) for f in (shared, secret, creds))
    layer = Layer(
        "slurm-config", packages=("slurmd",), accounts=(Account("slurm", 64030),),
        directories=(Directory("/etc/slurm"),), files=[shared, per_node, secret, creds, timer],
        services=(Service("slurmd"), Service("a.timer")),
        after=lambda facts, changed: [Step(StepKind.RESTART, "restart", "systemctl restart slurmd")],
    )  # fmt: skip
    got = shape(layer, common)
    assert [f.path for f in got.files] == ["/etc/slurm/slurm.conf"]
    assert got.packages == ("slurmd",) and got.accounts == layer.accounts and got.directories == layer.directories
    assert [(s.unit, s.enabled, s.running) for s in got.services] == [("slurmd", True, False)]
    assert got.after is None and got.before_files is None  # SHARED: the layer's own steps stay out


def test_node_tagged_operations_are_empty_and_do_not_converge() -> None:
    node_ops = [name for name, tag in OPERATION_TAGS.items() if tag is ImageTag.NODE]
    assert {"acct", "slurm-accounting-sync", "kubernetes-join", "slurm-controller", "slurm-compute"} <= set(node_ops)
    layer = Layer("acct", packages=("mariadb-server",), files=[_file("/etc/slurm/slurmdbd.conf", "x")])
    assert shape(layer, frozenset()).is_empty
    run = RunState(image=ImageBuild(frozenset()))
    assert not run.converges("node1", "slurm-accounting-sync") and run.converges("node1", "packages")


def test_image_build_stops_services_a_package_started_and_installs_only_what_is_missing() -> None:
    layer = shape(Layer("munge", packages=("munge",), services=(Service("munge"),)), frozenset())
    facts = LayerFacts(packages={"munge": "0.5.15"}, units={"munge": {"ActiveState": "active",
                       "UnitFileState": "enabled"}})  # fmt: skip
    steps, _ = plan_layer(layer, facts)
    assert [s.kind for s in steps] == [StepKind.STOP]
    assert plan_layer(Layer("munge", packages=("munge",)), facts)[0] == []  # package present: no install


def test_layer_digest_is_stable_and_follows_content() -> None:
    a = Layer("base", packages=("chrony", "curl"), files=[_file("/etc/a", "1")])
    b = Layer("base", packages=("curl", "chrony"), files=[_file("/etc/a", "1")])
    c = Layer("base", packages=("curl", "chrony"), files=[_file("/etc/a", "2")])
    assert layer_digest(a) == layer_digest(b) != layer_digest(c)


def test_compare_mode_reads_the_record_in_the_base_layers_round_trip() -> None:
    spec = load_spec(LAB_SPEC)
    hook = ImageCompare()
    layer = Layer("base", packages=("curl",))
    base = hook.layer("node2", layer)
    assert IMAGE_RECORD_PATH in base.read_paths and IMAGE_RECORD_PATH not in layer.read_paths
    record = {"group": "workers", "layers": {"base": layer_digest(layer)}}
    plan_layer(base, LayerFacts(packages={"curl": "1"}, contents={IMAGE_RECORD_PATH: json.dumps(record)}))
    assert hook.statuses(spec)["node2"].line().startswith("image matches spec")
    record["layers"] = {"base": "0" * 64, "munge": "1" * 64}
    plan_layer(base, LayerFacts(packages={"curl": "1"}, contents={IMAGE_RECORD_PATH: json.dumps(record)}))
    assert hook.statuses(spec)["node2"].differs == ("base", "munge")


def test_common_files_of_the_lab_workers_leave_out_what_differs_and_secrets() -> None:
    spec = load_spec(LAB_SPEC)
    paths = {p for p, _ in common_files(spec, group_nodes(spec, "workers"))}
    assert "/etc/slurm/slurm.conf" in paths
    assert "/etc/munge/munge.key" not in paths and "/etc/gpuforge/health.json" not in paths
    assert "/etc/apt/apt.conf.d/01gpuforge-proxy" not in paths  # the build's own proxy stands in for it
    with pytest.raises(ImageSpecError, match="--group"):
        group_nodes(spec, "nope")


def test_build_spec_changes_only_the_connection_and_the_package_source() -> None:
    base = {"cluster": {"name": "c"}, "ssh": {"user": "admin", "sudo": True}, "sources": {"mode": "upstream"}}
    got = build_spec_data(base, "/k", "/kh", "http://10.213.21.1:3142")
    assert got["ssh"] == {"user": "root", "key": "/k", "known_hosts": "/kh"}
    assert got["sources"] == {"mode": "mirror", "apt_proxy": "http://10.213.21.1:3142"}
    assert base["sources"] == {"mode": "upstream"}
    # a Vagrant group's nodes are reached through `vagrant ssh-config`; the build container over SSH
    vagrant = {**base, "node_groups": [{"name": "w", "hosts": "node2", "connector": "vagrant"}, {"name": "x"}]}
    fitted = build_spec_data(vagrant, "/k", "/kh", "http://10.213.21.1:3142")
    assert fitted["node_groups"] == [{"name": "w", "hosts": "node2", "connector": "ssh"}, {"name": "x"}]
    assert vagrant["node_groups"][0]["connector"] == "vagrant"


def _identity_tree(root: Path) -> None:
    for rel, text in {
        "etc/ssh/ssh_host_ed25519_key": "KEY", "etc/machine-id": "0123456789abcdef0123456789abcdef\n",
        "etc/munge/munge.key": "MUNGEKEYMUNGEKEY", "root/.ssh/authorized_keys": "ssh-ed25519 AAA build",
        "var/lib/gpuforge/pending/slurmd.restart": "", "etc/gpuforge/k8s/.join-token.yaml": "t",
        "etc/hosts": "10.213.21.11 node1\n", "etc/hostname": "node1\n", "etc/slurm/slurm.conf": "ClusterName=c\n",
        "etc/apt/apt.conf.d/01gpuforge-proxy": 'Acquire::http::Proxy "http://10.213.21.1:3142";\n',
        "var/lib/dkms/mok.key": "-----BEGIN PRIVATE KEY-----\n", "var/lib/dkms/mok.pub": "CERT",
    }.items():  # fmt: skip
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    (root / "etc/systemd/system").mkdir(parents=True, exist_ok=True)


def test_strip_removes_identity_and_run_state_and_the_check_finds_none(tmp_path: Path) -> None:
    _identity_tree(tmp_path)
    assert {str(f).split(":")[0] for f in strip.identity_findings(str(tmp_path))} >= {
        "etc/ssh/ssh_host_ed25519_key", "etc/munge/munge.key", "root/.ssh/authorized_keys", "var/lib/gpuforge",
        "etc/gpuforge/k8s", "etc/machine-id", "var/lib/dkms/mok.key"}  # fmt: skip
    strip.strip_tree(str(tmp_path), kept={"/etc/slurm/slurm.conf"})
    assert not (tmp_path / "var/lib/dkms/mok.key").exists(), "the DKMS signing key every node would share"
    assert strip.findings(str(tmp_path), [b"MUNGEKEYMUNGEKEY"]) == []
    assert (tmp_path / "etc/machine-id").read_text() == ""
    assert "node1" not in (tmp_path / "etc/hosts").read_text() + (tmp_path / "etc/hostname").read_text()
    assert (tmp_path / "etc/slurm/slurm.conf").read_text() == "ClusterName=c\n"
    assert (tmp_path / strip.HOST_KEYS_UNIT_PATH).is_file()


def test_strip_keeps_a_file_the_image_layers_wrote(tmp_path: Path) -> None:
    _identity_tree(tmp_path)
    strip.strip_tree(str(tmp_path), kept={"/etc/hosts"})
    assert (tmp_path / "etc/hosts").read_text() == "10.213.21.11 node1\n"


def test_the_secret_scan_finds_a_secret_anywhere(tmp_path: Path) -> None:
    (tmp_path / "etc/slurm").mkdir(parents=True)
    (tmp_path / "etc/slurm/slurmdbd.conf").write_text("StoragePass=s3cret-db-pass\n")
    found = strip.secret_findings(str(tmp_path), [b"s3cret-db-pass", b"short"])
    assert [f.path for f in found] == ["etc/slurm/slurmdbd.conf"]


def test_the_record_round_trips_through_the_reading_and_compares_per_layer() -> None:
    spec = load_spec(LAB_SPEC)
    rec = image_record(
        spec, "workers", {"base": "a" * 64, "slurm-config": "b" * 64}, "debian12", "2026-11-26T10:00:00Z"
    )
    parsed = parse_image_record(record_text(rec).splitlines())
    assert parsed.present and parsed.group == "workers" and parsed.layers["base"] == "a" * 64
    assert (
        compare(parsed, "workers", {"base": "a" * 64, "slurm-config": "b" * 64}).line().startswith("image matches spec")
    )
    changed = compare(parsed, "workers", {"base": "a" * 64, "slurm-config": "c" * 64})
    assert changed.differs == ("slurm-config",) and not changed.matches
    assert not compare(parse_image_record(["__missing=/etc/gpuforge/image.json"]), "workers", {}).matches
    assert parse_image_record(["{broken"]).problem


def test_formats_are_checked() -> None:
    assert parse_formats("qcow2,rootfs") == ("rootfs", "qcow2")
    with pytest.raises(ImageSpecError, match="--format"):
        parse_formats("vmdk")


def _tiny_tar(tmp_path: Path) -> Path:
    root = tmp_path / "tree"
    (root / "etc").mkdir(parents=True)
    (root / "etc/os-release").write_text("ID=debian\n")
    (root / "etc/b").write_text("b")
    (root / "etc/a").write_text("a")
    out = tmp_path / "rootfs.tar"
    tarball.write_tarball(str(root), str(out))
    return out


def test_the_rootfs_tarball_is_sorted_with_numeric_owners(tmp_path: Path) -> None:
    out = _tiny_tar(tmp_path)
    with tarfile.open(out) as tar:
        names = [m.name for m in tar.getmembers()]
        assert names == sorted(names, key=lambda n: n.split("/")) and "./etc/a" in names
        assert all(m.uname == "" or m.uname.isdigit() or m.uname == "root" for m in tar.getmembers())
    assert "--numeric-owner" in tarball.tar_argv("/r", "/o") and "--sort=name" in tarball.TAR_OPTIONS


def _sha(path: Path) -> str:
    return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()


def test_the_oci_layout_recomputes_to_every_digest_it_names(tmp_path: Path) -> None:
    tar = _tiny_tar(tmp_path)
    rec = {"built": "2026-11-26T10:00:00Z", "cluster": "c", "group": "workers", "spec_hash": "f" * 64,
           "base_os": "debian12", "gpuforge_version": "0.1.0", "layers": {"base": "a" * 64}}  # fmt: skip
    layout = tmp_path / "oci"
    digest = oci.write_layout(str(layout), str(tar), oci_labels(rec), rec["built"], "c-workers")  # type: ignore[arg-type]
    assert json.loads((layout / "oci-layout").read_text()) == {"imageLayoutVersion": "1.0.0"}
    index = json.loads((layout / "index.json").read_text())
    desc = index["manifests"][0]
    assert desc["digest"] == digest and desc["mediaType"] == oci.MANIFEST_MEDIA_TYPE
    blob = lambda d: layout / "blobs" / "sha256" / d.split(":")[1]  # noqa: E731
    assert _sha(blob(digest)) == digest and blob(digest).stat().st_size == desc["size"]
    manifest = json.loads(blob(digest).read_text())
    for d in [manifest["config"], *manifest["layers"]]:
        assert _sha(blob(d["digest"])) == d["digest"] and blob(d["digest"]).stat().st_size == d["size"]
    config = json.loads(blob(manifest["config"]["digest"]).read_text())
    raw = gzip.decompress(blob(manifest["layers"][0]["digest"]).read_bytes())
    assert config["rootfs"]["diff_ids"] == ["sha256:" + hashlib.sha256(raw).hexdigest()] == [_sha(tar)]
    labels = config["config"]["Labels"]
    assert labels["io.gpuforge.spec-hash"] == "f" * 64 and labels["io.gpuforge.group"] == "workers"
    assert labels["io.gpuforge.layer.base"] == "a" * 64 and labels["io.gpuforge.version"] == "0.1.0"
    assert sorted(os.listdir(layout / "blobs" / "sha256")) == sorted(
        d.split(":")[1] for d in [digest, manifest["config"]["digest"], manifest["layers"][0]["digest"]]
    )
    oci.verify_layout(str(layout))
    again = tmp_path / "oci2"
    assert oci.write_layout(str(again), str(tar), oci_labels(rec), rec["built"], "c-workers") == digest  # type: ignore[arg-type]


def test_a_tampered_blob_fails_verification(tmp_path: Path) -> None:
    tar = _tiny_tar(tmp_path)
    layout = tmp_path / "oci"
    oci.write_layout(str(layout), str(tar), {}, "2026-11-26T10:00:00Z", "x")
    index = json.loads((layout / "index.json").read_text())
    manifest = json.loads((layout / "blobs/sha256" / index["manifests"][0]["digest"][7:]).read_text())
    (layout / "blobs/sha256" / manifest["layers"][0]["digest"][7:]).write_bytes(b"tampered")
    with pytest.raises(oci.LayoutError):
        oci.verify_layout(str(layout))


def test_the_oci_archive_holds_the_layout(tmp_path: Path) -> None:
    tar = _tiny_tar(tmp_path)
    layout = tmp_path / "oci"
    oci.write_layout(str(layout), str(tar), {}, "2026-11-26T10:00:00Z", "x")
    oci.archive_layout(str(layout), str(tmp_path / "a.tar"))
    with tarfile.open(tmp_path / "a.tar") as a:
        assert {"index.json", "oci-layout"} <= set(a.getnames())


def test_installed_packages_reads_dpkg_status(tmp_path: Path) -> None:
    (tmp_path / "var/lib/dpkg").mkdir(parents=True)
    (tmp_path / "var/lib/dpkg/status").write_text(
        "Package: munge\nStatus: install ok installed\nArchitecture: amd64\nVersion: 0.5.15-2\n\n"
        "Package: gone\nStatus: deinstall ok config-files\nVersion: 1\n"
    )
    assert installed_packages(str(tmp_path)) == {"munge": "0.5.15-2"}


def test_the_lab_unpacks_an_oci_layout_it_can_boot(tmp_path: Path) -> None:
    from gpuforge.lab.image_base import image_rootfs, oci_layers

    tar = _tiny_tar(tmp_path)
    layout = tmp_path / "oci"
    digest = oci.write_layout(str(layout), str(tar), {}, "2026-11-26T10:00:00Z", "x")
    assert oci_layers(str(layout))[0] == digest
    if subprocess.run(["tar", "--version"], capture_output=True).returncode != 0:
        pytest.skip("no GNU tar")
    root = image_rootfs(str(layout), cache_dir=str(tmp_path / "cache"))
    assert Path(root, "etc/os-release").read_text() == "ID=debian\n"
    assert image_rootfs(str(tar), cache_dir=str(tmp_path / "cache2")).endswith("rootfs")


def test_the_cluster_daemons_do_not_start_at_boot_from_the_image(tmp_path: Path) -> None:
    """Debian's slurmd postinst enables the unit in the image; at boot it would register with the
    slurm.conf the image was baked with. Apply enables and starts it after writing the node's config."""
    _identity_tree(tmp_path)
    wants = tmp_path / "etc/systemd/system/multi-user.target.wants"
    wants.mkdir(parents=True)
    for unit in ("slurmd.service", "munge.service", "ssh.service"):
        (wants / unit).symlink_to(f"/lib/systemd/system/{unit}")
    strip.strip_tree(str(tmp_path))
    assert sorted(p.name for p in wants.iterdir()) == ["gpuforge-ssh-host-keys.service", "ssh.service"]


def test_bootable_formats_put_a_kernel_in_the_image() -> None:
    assert parse_formats("vagrant,qcow2") == ("qcow2", "vagrant")
    assert not bootable.needs_kernel(("rootfs", "oci"))
    assert bootable.needs_kernel(("qcow2",)) and bootable.needs_kernel(("rootfs", "vagrant"))
    command = bootable.kernel_install_command()
    # the Vagrant box's kernel packages (Debian's generic kernel: rdma_rxe, nfsd), no recommends, no prompt
    assert command.endswith("apt-get install -y -q --no-install-recommends linux-image-amd64 initramfs-tools zstd")
    assert command.startswith("export DEBIAN_FRONTEND=noninteractive && apt-get update -q && ")
    assert bootable.box_name("gffabric", "workers") == "gpuforge/gffabric-workers"


def test_boot_files_are_the_newest_kernel_and_initrd_copied_readable(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    with pytest.raises(LabError, match=r"/boot/vmlinuz-\*"):
        bootable.boot_files(str(tree))
    (tree / "boot").mkdir(parents=True)
    for name in ("vmlinuz-6.1.0-28-amd64", "initrd.img-6.1.0-28-amd64", "config-6.1.0-28-amd64"):
        (tree / "boot" / name).write_text(name)
    assert bootable.kernel_release(str(tree)) == "6.1.0-28-amd64"
    out = tmp_path / "out"
    out.mkdir()
    kernel, initrd = bootable.write_boot_files(str(tree), out)
    assert kernel.read_text() == "vmlinuz-6.1.0-28-amd64" and initrd.read_text() == "initrd.img-6.1.0-28-amd64"
    assert oct(kernel.stat().st_mode & 0o777) == "0o644" and oct(initrd.stat().st_mode & 0o777) == "0o644"
    (tree / "boot" / "initrd.img-6.1.0-28-amd64").unlink()
    with pytest.raises(LabError, match="initrd"):
        bootable.boot_files(str(tree))


def test_the_kernel_is_an_oci_label_when_the_image_has_one() -> None:
    record = {"built": "2026-11-26T00:00:00Z", "cluster": "c", "group": "g", "spec_hash": "h", "base_os": "debian12",
              "gpuforge_version": "1", "layers": {}}  # fmt: skip
    assert "io.gpuforge.kernel" not in oci_labels(record)
    assert oci_labels({**record, "kernel": "6.1.0-28-amd64"})["io.gpuforge.kernel"] == "6.1.0-28-amd64"


def test_a_folder_qemu_cannot_enter_is_named() -> None:
    top = Path(tempfile.mkdtemp(prefix="gpuforge-test-", dir="/var/tmp"))  # /var/tmp: every user enters it
    try:
        inner = top / "middle" / "box"
        inner.mkdir(parents=True)
        for folder in (top, top / "middle", inner):
            folder.chmod(0o755)
        assert bootable.closed_folder(inner) is None
        (top / "middle").chmod(0o750)
        assert bootable.closed_folder(inner) == (top / "middle").resolve()
    finally:
        shutil.rmtree(top)


def test_builds_at_once_take_their_own_build_labs_and_a_build_past_the_last_is_refused(tmp_path: Path) -> None:
    from gpuforge.image.build import BUILD_LABS, ImageBuildError, free_build_lab

    assert len({name for name, _ in BUILD_LABS}) == len({subnet for _, subnet in BUILD_LABS}) == len(BUILD_LABS)
    labs = (("a", "10.0.0.0/24"), ("b", "10.0.1.0/24"))
    with free_build_lab(labs, str(tmp_path)) as first, free_build_lab(labs, str(tmp_path)) as second:
        assert (first, second) == (labs[0], labs[1])
        busy = r"2 image builds run on this host already \(build labs a, b\)"
        with pytest.raises(ImageBuildError, match=busy), free_build_lab(labs, str(tmp_path)):
            pass
    with free_build_lab(labs, str(tmp_path)) as again:  # both released
        assert again == labs[0]


def test_a_group_on_debian13_is_baked_and_an_os_without_a_lab_release_is_refused_naming_the_group() -> None:
    """Images are baked on the lab's releases (a build lab of the group's release): Debian 12 and 13."""
    data = yaml.safe_load(LAB_SPEC.read_text())
    data["node_groups"][1]["os"] = "debian13"
    assert {n.os.value for n in group_nodes(Spec.model_validate(data), "workers")} == {"debian13"}
    data["node_groups"][1]["os"] = "ubuntu24.04"
    with pytest.raises(ImageSpecError, match=r"node_groups\[workers\]\.os"):
        group_nodes(Spec.model_validate(data), "workers")
