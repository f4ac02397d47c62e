"""SchedMD's Slurm built from its release tarball (``slurm.source: build``): small pure functions.

One build per platform of the Slurm nodes (:func:`build_inputs`), named by a key over everything
that changes its result (platform, package version, tarball sha256, options): the control host
keeps each finished build in ``<state root>/slurm-builds/<key>/`` (``repo/``: the debs, ``Packages``,
a signed ``InRelease``; ``key.gpg``: the public half of the key that signed it; ``build.json``).
The nodes get that folder as a flat apt repository (``REPO_ON_NODE/<key>``) that apt trusts through
``KEYRING`` only, and install SchedMD's package names from it, held at ``versions.slurm``. On an rpm
platform the same folder holds SchedMD's rpms and ``repodata/`` with a signed ``repomd.xml``, and the
node's ``.repo`` file trusts the build's key only (``render.slurm_build_rpm``).

Invariant: the key changes whenever an input of the build changes, and nothing else goes in it;
every path and value in a command below is either a constant or quoted (``shlex.quote``).
"""

from __future__ import annotations

import hashlib
import json
import shlex
from dataclasses import dataclass
from pathlib import Path

from gpuforge.render import slurm_build_rpm as rpm
from gpuforge.spec import Spec
from gpuforge.spec import slurm_rpm_build as spec_rpm
from gpuforge.spec.nodes import Node
from gpuforge.spec.platforms import PackageFormat
from gpuforge.spec.slurm_build_rules import build_hosts, known_sha256, platform_key
from gpuforge.spec.slurm_packages import SITE_PACKAGES
from gpuforge.spec.slurm_tarballs import tarball, upstream_version

REPO_ON_NODE = "/var/lib/gpuforge/slurm-build"
KEYRING = "/etc/apt/keyrings/gpuforge-slurm.gpg"
SOURCES_FILE = "/etc/apt/sources.list.d/gpuforge-slurm.sources"
#: Where a build host unpacks and builds (one folder per key, made 0700 and emptied first).
WORK_ON_HOST = "/var/tmp/gpuforge-slurm-build"
#: Packages every build must make (SchedMD's debian/control): the roles gpuforge installs.
REQUIRED_PACKAGES = ("slurm-smd", *sorted({p for p in SITE_PACKAGES["deb"].values() if p}))
#: The same for slurm.spec's rpms (``slurm`` holds the commands and plugins).
REQUIRED_RPMS = tuple(sorted({p for p in SITE_PACKAGES["rpm"].values() if p}))
#: What the build host needs besides the tarball's Build-Depends (apt-get build-dep reads those).
BUILD_TOOLS = ("build-essential", "dpkg-dev", "fakeroot")
NVML_BUILD_DEPENDS = ("libnvidia-ml-dev",)
BUILDS_FOLDER = "slurm-builds"
#: A build folder's parts: the flat repository, the public key that signed it, the build's record.
REPO_FOLDER = "repo"
PUBLIC_KEY_FILE = "key.gpg"
#: The public key as the node reads it, by format: apt's Signed-By takes the binary key, dnf's gpgkey
#: only an ASCII-armored one (``key.asc`` beside ``key.gpg`` in an rpm build's folder).
NODE_KEY_FILE = {PackageFormat.DEB: PUBLIC_KEY_FILE, PackageFormat.RPM: "key.asc"}
RECORD_FILE = "build.json"


@dataclass(frozen=True)
class BuildInputs:
    """Everything one build depends on, and where it runs."""

    platform: str
    version: str
    sha256: str
    nvml: bool
    host: str
    file_name: str
    top_folder: str | None
    """The tarball's one top folder when gpuforge's table knows it (checked before building)."""
    format: PackageFormat = PackageFormat.DEB
    """SchedMD's debian/ (``dpkg-buildpackage``) or slurm.spec (``rpmbuild -ta``): the build host's."""
    crb: str = "true"
    """How the build host enables CodeReady Builder (its platform row's ``crb``; rpm builds only)."""

    @property
    def upstream(self) -> str:
        return upstream_version(self.version)

    @property
    def key(self) -> str:
        """The cache key: platform, version, digest and options, nothing else (not the host)."""
        parts: list[object] = [self.platform, self.version, self.sha256, self.nvml]
        if self.format is PackageFormat.RPM:  # gpuforge chooses slurm.spec's options: they are an input too
            parts.append(spec_rpm.rpmbuild_options(self.nvml))
        data = json.dumps(parts, separators=(",", ":"))
        return f"{self.platform}-{self.version}-{hashlib.sha256(data.encode()).hexdigest()[:16]}"


def build_inputs(spec: Spec) -> dict[str, BuildInputs]:
    """Platform key -> the build its Slurm nodes need (empty unless ``slurm.source: build``)."""
    s = spec.slurm
    sha = known_sha256(spec)
    if s is None or s.build is None or sha is None:
        return {}
    row = tarball(upstream_version(spec.versions.slurm))
    name = row.file_name if row else f"slurm-{upstream_version(spec.versions.slurm)}.tar.gz"
    top = row.top_folder if row else None
    return {
        key: BuildInputs(
            key, spec.versions.slurm, sha, s.build.nvml, host.name, name, top,
            host.os.distribution.package_format, host.os.distribution.crb or "true",
        )
        for key, host in build_hosts(spec).items()
    }  # fmt: skip


def inputs_for(spec: Spec, node: Node) -> BuildInputs | None:
    """The build a node installs from (None: not built by gpuforge, or no build host for its platform)."""
    return build_inputs(spec).get(platform_key(node))


def build_folder(state_root: Path, inputs: BuildInputs) -> Path:
    return state_root / BUILDS_FOLDER / inputs.key


#: SchedMD's units start without a config (slurmd.service has no ConditionPathExists: a configless slurmd
#: fetches its config), and the packages' postinst starts them at install, before gpuforge writes the
#: files: slurmd then loops on DNS SRV lookups until systemd's start timeout (seen on the lab). A
#: drop-in holds each daemon until a file only gpuforge writes for it exists (SchedMD's slurmd package
#: ships /etc/default/slurmd itself); a condition not met skips the start, and gpuforge starts the
#: daemon once its files are there. ``|``: any one of the paths (systemd.unit(5), triggering conditions).
WAIT_FOR_CONFIG = {
    "slurmd": ("/etc/slurm/slurm.conf", "/etc/systemd/system/slurmd.service.d/gpuforge-configless.conf"),
    "slurmctld": ("/etc/slurm/slurm.conf",),
    "slurmdbd": ("/etc/slurm/slurmdbd.conf",),
}


def wait_for_config_dropins() -> list[tuple[str, str]]:
    """(path, text) of each daemon's drop-in: no start before gpuforge's config file is there (pushed
    slurm.conf, or for a configless slurmd gpuforge's configless drop-in)."""
    out = []
    for unit, paths in WAIT_FOR_CONFIG.items():
        lines = "".join(f"ConditionPathExists={'|' if len(paths) > 1 else ''}{p}\n" for p in paths)
        text = f"# gpuforge: SchedMD's {unit} starts only once gpuforge wrote its config\n[Unit]\n{lines}"
        out.append((f"/etc/systemd/system/{unit}.service.d/gpuforge-wait-for-config.conf", text))
    return out


def sources_text(inputs: BuildInputs) -> str:
    """The node's deb822 source for the build's flat repository, trusted through KEYRING only."""
    return (
        f"# gpuforge: SchedMD's Slurm {inputs.version} built from its release tarball (slurm.source: build)\n"
        f"Types: deb\nURIs: file:{REPO_ON_NODE}/{inputs.key}\nSuites: ./\nSigned-By: {KEYRING}\n"
    )


def node_paths(inputs: BuildInputs) -> tuple[str, str]:
    """Where a node keeps the build's public key and the package manager's source for it, by format."""
    return {PackageFormat.DEB: (KEYRING, SOURCES_FILE), PackageFormat.RPM: (rpm.KEY, rpm.REPO_FILE)}[inputs.format]


def source_text(inputs: BuildInputs) -> str:
    """The node's source for the build: apt's deb822 file (InRelease checked with KEYRING) or dnf's
    ``.repo`` file (repomd.xml.asc checked with the build's key)."""
    texts = {PackageFormat.DEB: sources_text, PackageFormat.RPM: lambda i: rpm.repo_text(i, REPO_ON_NODE)}
    return texts[inputs.format](inputs)


def required_packages(inputs: BuildInputs) -> tuple[str, ...]:
    """The packages the build must make at ``versions.slurm`` (those gpuforge installs), by format."""
    return {PackageFormat.DEB: REQUIRED_PACKAGES, PackageFormat.RPM: REQUIRED_RPMS}[inputs.format]


#: The signed index of a build's repository, by format (relative to ``repo/``).
SIGNED_INDEX = {PackageFormat.DEB: "InRelease", PackageFormat.RPM: rpm.INDEX}


#: The members of the tar stream :func:`publish_command` reads (``orchestrate.slurm_build.publish_tar``);
#: ``key.gpg`` is the build's public key (ASCII-armored for an rpm build: dnf's ``gpgkey`` reads only those).
PUBLISH_REPO, PUBLISH_KEY, PUBLISH_SOURCES = "repo", "key.gpg", "sources"


def publish_command(inputs: BuildInputs) -> str:
    """Put a build's repository in a node's apt sources from a tar stream on stdin (``repo/`` with the
    debs, ``Packages`` and ``InRelease``; ``key.gpg``; ``sources``), as the ``slurm-repo`` layer would
    write it, for ``slurm-upgrade``: the folder under its key first, then the key and the source, each
    renamed into place, so apt reads the old build or the new one, never half of one. Installs nothing."""
    base = shlex.quote(REPO_ON_NODE)
    dest = shlex.quote(f"{REPO_ON_NODE}/{inputs.key}")
    new = shlex.quote(f"{REPO_ON_NODE}/.{inputs.key}.new")
    key, src = (shlex.quote(p) for p in node_paths(inputs))
    index = SIGNED_INDEX[inputs.format]
    return (
        f"install -d -m 0755 {base} && t=$(mktemp -d {base}/.publish.XXXXXX) && trap 'rm -rf \"$t\"' EXIT && "
        'tar -xf - -C "$t" --no-same-owner --no-same-permissions && '
        f'[ -f "$t/{PUBLISH_REPO}/{index}" ] && [ -f "$t/{PUBLISH_KEY}" ] && [ -f "$t/{PUBLISH_SOURCES}" ] || '
        "{ echo 'the build sent is incomplete' >&2; exit 1; }; "
        f'rm -rf {new} && find "$t/{PUBLISH_REPO}" -type d -exec chmod 0755 {{}} + && '
        f'find "$t/{PUBLISH_REPO}" -type f -exec chmod 0644 {{}} + && '
        f'mv "$t/{PUBLISH_REPO}" {new} && rm -rf {dest} && mv {new} {dest} && '
        f'install -D -m 0644 "$t/{PUBLISH_KEY}" {key}.gpuforge-new && mv -f {key}.gpuforge-new {key} && '
        f'install -D -m 0644 "$t/{PUBLISH_SOURCES}" {src}.gpuforge-new && mv -f {src}.gpuforge-new {src}'
    )


def work_folder(inputs: BuildInputs) -> str:
    return f"{WORK_ON_HOST}/{inputs.key}"


#: Where the build host's processes are listed (a test points it at a folder of its own).
PROC = "/proc"
#: Exit status of :func:`busy_command` on a build host that runs Slurm jobs.
BUSY_EXIT = 6


def busy_command() -> str:
    """Exit :data:`BUSY_EXIT`, printing the job steps' titles (at most 5, 80 characters each), while the
    build host runs Slurm work: a ``slurmstepd`` runs there (slurmd starts one per job step on the node,
    the batch and extern steps included, and it ends with the step). The compile takes every core of
    the host, so a node with running work is never a build host. 0: no job step there."""
    proc = shlex.quote(PROC)
    return (
        f'steps=$(for d in {proc}/[0-9]*; do {{ read -r c < "$d/comm"; }} 2>/dev/null || continue; '
        '[ "$c" = slurmstepd ] || continue; tr "\\0" " " < "$d/cmdline" 2>/dev/null; echo; done); '
        f'[ -z "$steps" ] || {{ echo "$steps" | head -n 5 | cut -c1-80; exit {BUSY_EXIT}; }}'
    )


def upload_command(inputs: BuildInputs) -> str:
    """Reads the tarball on stdin into the build host's work folder, kept only with the known sha256."""
    work = shlex.quote(work_folder(inputs))
    tar = f"{work}/src.tar.gz"
    return (
        f"rm -rf {work} && install -d -m 0700 {work} && cat > {tar}.part && "
        f"echo {shlex.quote(inputs.sha256)}'  '{tar}.part | sha256sum -c --quiet - && mv {tar}.part {tar}"
    )


def build_script(inputs: BuildInputs, jobs: int | None = None) -> str:
    """The build on the build host, by package format: SchedMD's debian/ (:func:`deb_build_script`)
    or slurm.spec (``render.slurm_build_rpm.build_script``); the same exit statuses."""
    scripts = {
        PackageFormat.DEB: lambda: deb_build_script(inputs, jobs),
        PackageFormat.RPM: lambda: rpm.build_script(inputs, work_folder(inputs), inputs.crb, jobs),
    }
    return scripts[inputs.format]()


def deb_build_script(inputs: BuildInputs, jobs: int | None = None) -> str:
    """The build on a deb build host: unpack, check the packaging and its version, install the build
    dependencies (the tarball's own debian/control), ``dpkg-buildpackage -b``, index the debs.

    Exit 3: the tarball is not what it should be; 4: a build dependency cannot be installed
    (apt's last lines say which); 5: the compile failed (the build log's last lines)."""
    work = shlex.quote(work_folder(inputs))
    top = inputs.top_folder
    check_top = (
        f'[ "$(tar -tzf src.tar.gz | cut -d/ -f1 | sort -u)" = {shlex.quote(top)} ] || '
        f"{{ echo 'the tarball has not the one top folder {top}'; exit 3; }}; "
        if top
        else ""
    )
    tools = " ".join(BUILD_TOOLS + (NVML_BUILD_DEPENDS if inputs.nvml else ()))
    parallel = f"parallel={jobs}" if jobs else "parallel=$(nproc)"
    version = shlex.quote(f"({inputs.version})")
    return (
        f"set -u; cd {work} || exit 3; {check_top}rm -rf src out && mkdir src out && "
        "tar -xzf src.tar.gz -C src --strip-components=1 --no-same-owner || exit 3; "
        '[ -f src/debian/control ] || { echo "the tarball has no debian/ packaging (SchedMD\'s came with 23.11)"; '
        "exit 3; }; "
        f'head -n1 src/debian/changelog | grep -qF {version} || {{ echo "debian/changelog is not at '
        f'{inputs.version}: $(head -n1 src/debian/changelog)"; exit 3; }}; '
        "export DEBIAN_FRONTEND=noninteractive; "
        "{ apt-get update -q && "
        f"apt-get install -y -q --no-install-recommends {tools} && "
        "apt-get build-dep -y -q --no-install-recommends ./src; } > deps.log 2>&1 || "
        "{ echo 'build dependencies could not be installed:'; grep -E '^(E|W):|Unable|unmet|Depends' deps.log "
        "| tail -n 15; exit 4; }; "
        f"(cd src && DEB_BUILD_OPTIONS='nocheck noautodbgsym {parallel}' dpkg-buildpackage -b -uc -us) "
        "> build.log 2>&1 || "
        "{ echo 'dpkg-buildpackage failed; the last lines of its log:'; tail -n 40 build.log; exit 5; }; "
        "mv ./*.deb out/ && (cd out && dpkg-scanpackages -m . > Packages) && ls out"
    )


def download_command(inputs: BuildInputs) -> str:
    """The built packages and their index as a tar stream on stdout (debs and ``Packages``; rpms and
    ``repodata/``)."""
    out = work_folder(inputs) + "/out"
    deb = f"cd {shlex.quote(out)} && tar -cf - Packages ./*.deb"
    return {PackageFormat.DEB: deb, PackageFormat.RPM: rpm.download_command(out)}[inputs.format]


def cleanup_command(inputs: BuildInputs) -> str:
    return f"rm -rf {shlex.quote(work_folder(inputs))}"
