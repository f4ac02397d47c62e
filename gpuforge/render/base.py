"""Base layer files: /etc/hosts, the package proxy, fixed service accounts."""

from __future__ import annotations

from collections.abc import Sequence

from gpuforge.render.escape import apt_conf_string
from gpuforge.render.files import RenderedFile, header, per_spec, render_template
from gpuforge.render.slurm import slurm_apt_pin
from gpuforge.spec.model import Spec
from gpuforge.spec.nodes import Node, resolve_nodes

CHRONY_SOURCES = "/etc/chrony/sources.d/gpuforge.sources"

# Service accounts with the same IDs on every node (munge and Slurm compare UIDs).
SERVICE_ACCOUNTS: dict[str, int] = {"munge": 64030, "slurm": 64031}


@per_spec
def hosts_file(spec: Spec) -> str:
    """/etc/hosts naming every node (Slurm and munge resolve node names)."""
    entries = []
    for node in resolve_nodes(spec):
        if node.address is None:
            continue
        names = f"{node.name}.{spec.cluster.domain} {node.name}" if spec.cluster.domain else node.name
        entries.append({"address": node.address, "names": names})
    return render_template("base/hosts.j2", cluster=spec.cluster.name, entries=entries)


#: apt's drop-in naming the site mirror's proxy.
APT_PROXY = "/etc/apt/apt.conf.d/01gpuforge-proxy"


def apt_proxy_conf(proxy: str) -> str:
    """:data:`APT_PROXY`: every apt request through the proxy (``proxy`` as one apt.conf string)."""
    return header("//") + f"Acquire::http::Proxy {apt_conf_string(proxy)};\n"


#: apt's drop-in that stops translated package descriptions (the Translation-* indexes: 33 MB of
#: bookworm main's 83 MB of lists): nothing on a cluster node reads them, and every apt-get update
#: on every node would fetch, check and parse them. Ubuntu's own container images ship the same line.
APT_LANGUAGES = "/etc/apt/apt.conf.d/01gpuforge-languages"


def apt_languages_conf() -> str:
    """:data:`APT_LANGUAGES`: no translated descriptions."""
    return header("//") + 'Acquire::Languages "none";\n'


@per_spec
def _has_addresses(spec: Spec) -> bool:
    return any(n.address for n in resolve_nodes(spec))


def chrony_sources(servers: Sequence[str]) -> str:
    """chrony's drop-in source list (chrony reads ``/etc/chrony/sources.d/*.sources``)."""
    return header() + "".join(f"server {srv} iburst\n" for srv in servers)


def base_files(spec: Spec, node: Node) -> list[RenderedFile]:
    """Files every node gets."""
    files = []
    if _has_addresses(spec):
        files.append(RenderedFile("/etc/hosts", hosts_file(spec)))
    if spec.sources.apt_proxy and node.os.is_deb:
        files.append(RenderedFile(APT_PROXY, apt_proxy_conf(spec.sources.apt_proxy)))
    if node.os.is_deb and not spec.sources.apt_translations:
        files.append(RenderedFile(APT_LANGUAGES, apt_languages_conf()))
    files += slurm_apt_pin(spec, node)  # before any Slurm package is installed
    if spec.time_sync.enabled and spec.time_sync.servers:
        files.append(RenderedFile(CHRONY_SOURCES, chrony_sources(spec.time_sync.servers)))
    return files
