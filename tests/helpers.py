"""Shared test helpers: repository paths, upstream reference data, example specs and variants."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuforge.spec import Spec, load_spec, parse_spec
from tests import yaml_text

REPO = Path(__file__).resolve().parents[1]
INVENTORIES = REPO / "inventories"
UPSTREAM = REPO / ".." / "shared" / "reference" / "upstream"
#: Tests that read ``../shared/reference/upstream``: the data is part of the test bed, so its
#: absence is a failure (``upstream_data`` in tests/conftest.py), never a skip.
needs_upstream = pytest.mark.usefixtures("upstream_data")


def require_upstream() -> Path:
    """``UPSTREAM``, or a test failure naming what is missing."""
    if not UPSTREAM.is_dir():
        pytest.fail(
            f"the upstream reference data is missing ({UPSTREAM.resolve()}): clone the project with ../shared "
            "beside it (the test bed includes it)",
            pytrace=False,
        )
    return UPSTREAM


def inventory(name: str) -> Spec:
    """An example spec from inventories/."""
    return load_spec(INVENTORIES / f"{name}.yaml")


def variant(name: str, change: Callable[[dict[str, Any]], None]) -> Spec:
    """An example inventory with a change applied to its YAML data, checked like a real file."""
    data = yaml.safe_load((INVENTORIES / f"{name}.yaml").read_text())
    change(data)
    return parse_spec(yaml_text.dump(data))


#: A well-formed bundle key fingerprint for specs that are only rendered (no bundle is verified).
RENDER_ONLY_BUNDLE_FINGERPRINT = "0123456789ABCDEF0123456789ABCDEF01234567"


def write_bundle_manifest(
    bundle: Path, complete: bool = True, text: Callable[[dict[str, Any]], str] = json.dumps
) -> dict[str, str]:
    """A manifest listing every regular file of a test bundle (path -> sha256 returned), signed as
    ``gpuforge bundle`` signs it: a key made for the call signs the apt repositories, then the
    manifest (``manifest.json.asc``); ``bundle_fingerprint`` reads that key's fingerprint.
    ``text`` writes the manifest (a test's malformed one is signed all the same)."""
    import hashlib

    from gpuforge.bundle.layout import FORMAT, MANIFEST, MANIFEST_SIG
    from gpuforge.bundle.signing import BundleSigner
    from gpuforge.bundle.trust import sign_repositories

    repos = sorted(p.parent.relative_to(bundle).as_posix() for p in bundle.glob("apt/*/Packages"))

    def write(rel: str, data: bytes) -> None:
        (bundle / rel).parent.mkdir(parents=True, exist_ok=True)
        (bundle / rel).write_bytes(data)

    with BundleSigner("gpuforge test bundle") as signer:
        sign_repositories(signer, bundle, repos, write)
        files = sorted(
            p
            for p in bundle.rglob("*")
            if p.is_file() and not p.is_symlink() and p.name not in (MANIFEST, MANIFEST_SIG)
        )
        entries: list[dict[str, Any]] = [
            {
                "path": p.relative_to(bundle).as_posix(),
                "size": p.stat().st_size,
                "sha256": hashlib.sha256(p.read_bytes()).hexdigest(),
            }
            for p in files
        ]
        data = text({"format": FORMAT, "files": entries, "complete": complete}).encode()
        write(MANIFEST, data)
        write(MANIFEST_SIG, signer.detach_sign(data))
    return {e["path"]: e["sha256"] for e in entries}


def bundle_fingerprint(bundle: Path) -> str:
    """The fingerprint of the key a test bundle holds (what the operator recorded when it was made)."""
    from gpuforge.bundle.signing import BUNDLE_KEY, primary_fingerprints

    [fingerprint] = primary_fingerprints((bundle / BUNDLE_KEY).read_bytes())
    return fingerprint


def wait_until(what: str, fn: Callable[[], Any], timeout: float, every: float) -> Any:
    """``fn()``'s first truthy value, polling every ``every`` s; AssertionError naming ``what`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = fn()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout:.0f} s: {what}")
        time.sleep(every)


#: Ubuntu 22.04's own Slurm (21.08) drives cgroup v1 only and 22.04 mounts only cgroup v2: ``check``
#: refuses it with Slurm's cgroup plugins (``slurm_rules.distro_slurm_cgroup``). Tests of other layers on 22.04
#: track processes with linuxproc (no cgroup plugin), which leaves every package name as it was.
JAMMY_TRACKING = "  process_tracking: linuxproc\n"


def jammy_tracking(os: str) -> str:
    """The line that ends a spec text's (last) ``slurm:`` section on Ubuntu 22.04; nothing elsewhere."""
    return JAMMY_TRACKING if os == "ubuntu22.04" else ""


def jammy_data(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` with ``slurm.process_tracking: linuxproc`` where a group runs Ubuntu 22.04's own Slurm."""
    cluster_os = data.get("cluster", {}).get("os")
    oses = {g.get("os") or cluster_os for g in data.get("node_groups", [])}
    slurm = data.get("slurm")
    if "ubuntu22.04" in oses and isinstance(slurm, dict) and slurm.get("source", "distro") == "distro":
        slurm["process_tracking"] = "linuxproc"
    return data
