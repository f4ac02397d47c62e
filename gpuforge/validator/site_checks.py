"""The site's testinfra checks (``site.testinfra``): run by ``validate`` against each target node.

Each (checks path, node) pair is one pytest run with pytest-testinfra's ``ssh://`` backend over
an ssh_config written from the spec: the node's address, port, user and key, host keys checked
(``StrictHostKeyChecking yes`` with the spec's known_hosts). The runs go in parallel beside the
built-in checks; their JUnit XML becomes results of the ``site`` layer: a passing test ``pass``,
a failing one ``fail`` with its assertion message, a test that errors ``error`` (never ``pass``),
a skipped one ``skip``. A run that produces no JUnit file (pytest-testinfra missing, a collection
error) is one ``error`` result naming the reason, never nothing.

The pytest run is isolated from whatever surrounds the checks: its own empty ini file and root
folder, no cache, conftest files only from the checks' own folder down.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from collections.abc import Callable, Mapping
from pathlib import Path

from gpuforge.probes.vagrant import VagrantHost
from gpuforge.spec import Spec
from gpuforge.spec.extensions import TestinfraChecks
from gpuforge.spec.model import Connector
from gpuforge.spec.nodes import Node, targeted
from gpuforge.validator.node.base import BLOCKED, ERROR, FAIL, PASS, SKIP
from gpuforge.validator.node.framework import Result

SITE_LAYER = "site"
RUN_TIMEOUT_S = 600.0
_NOT_ID = re.compile(r"[^a-z0-9_]+")


def checks_for(spec: Spec, node: Node) -> list[TestinfraChecks]:
    """The site.testinfra entries that target ``node`` (all of them name no target: every node)."""
    return [entry for entry in spec.site.testinfra if targeted(node, entry.targets)]


def ssh_config_text(spec: Spec, node: Node, host: str, port: int, user: str, key: str | None) -> str:
    """An ssh_config block for one node: host keys always checked."""
    lines = [
        f"Host {node.name}",
        f"  HostName {host}",
        f"  Port {port}",
        f"  User {user}",
        "  BatchMode yes",
        "  StrictHostKeyChecking yes",
        "  ConnectTimeout 10",
    ]
    if spec.ssh.known_hosts:
        lines.append(f'  UserKnownHostsFile "{os.path.expanduser(spec.ssh.known_hosts)}"')
    if key:
        lines += [f'  IdentityFile "{os.path.expanduser(key)}"', "  IdentitiesOnly yes"]
    return "\n".join(lines) + "\n"


def result_id(classname: str, name: str, node: str = "") -> str:
    """``site.<module>__<test>`` in the report's id alphabet (testinfra's ``[ssh://node]`` parameter
    is left out: the report names the node)."""
    host = f"ssh://{node}"
    name = name.replace(f"[{host}]", "").replace(f"[{host}-", "[").replace(f"-{host}]", "]")
    module = classname.rsplit(".", 1)[-1].lower()
    return f"site.{_NOT_ID.sub('_', module).strip('_')}__{_NOT_ID.sub('_', name.lower()).strip('_')}"


def results_from_junit(xml_text: str, node: str = "") -> list[Result]:
    """Results from pytest's JUnit XML of a run against ``node`` (pure, for tests)."""
    root = ET.fromstring(xml_text)
    out = []
    for case in root.iter("testcase"):
        rid = result_id(case.get("classname", "site"), case.get("name", "test"), node)
        seconds = round(float(case.get("time") or 0.0), 4)
        failure, error, skipped = case.find("failure"), case.find("error"), case.find("skipped")
        if error is not None:
            status, detail = ERROR, error.get("message") or (error.text or "")
        elif failure is not None:
            status, detail = FAIL, failure.get("message") or (failure.text or "")
        elif skipped is not None:
            status, detail = SKIP, skipped.get("message") or "skipped"
        else:
            status, detail = PASS, "passed"
        message = " ".join(detail.split())[:500] or status
        out.append(Result(rid, SITE_LAYER, "critical", status, message, seconds))
    return out


def run_checks(
    spec: Spec, spec_dir: Path, node: Node, entry: TestinfraChecks, target: tuple[str, int, str, str | None]
) -> list[Result]:
    """One pytest-testinfra run of ``entry`` against ``node`` at ``target`` (host, port, user, key)."""
    if importlib.util.find_spec("testinfra") is None:
        return [_run_error(entry, "pytest-testinfra is not installed: pip install 'gpuforge[testinfra]'")]
    path = (spec_dir / entry.path).resolve()
    confcut = path if path.is_dir() else path.parent
    with tempfile.TemporaryDirectory(prefix="gpuforge-testinfra-") as tmp:
        work = Path(tmp)
        (work / "ssh_config").write_text(ssh_config_text(spec, node, *target))
        (work / "pytest.ini").write_text("[pytest]\n")
        junit = work / "junit.xml"
        argv = [
            sys.executable, "-m", "pytest", str(path), f"--hosts=ssh://{node.name}",
            f"--ssh-config={work / 'ssh_config'}", f"--junitxml={junit}", "-c", str(work / "pytest.ini"),
            f"--rootdir={work}", f"--confcutdir={confcut}", "-p", "no:cacheprovider", "-q", "-o", "junit_family=xunit2",
        ]  # fmt: skip
        if spec.ssh.sudo and target[2] != "root":
            argv.append("--sudo")
        try:
            cp = subprocess.run(argv, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, cwd=work)
        except subprocess.TimeoutExpired:
            return [_run_error(entry, f"no result within {RUN_TIMEOUT_S:.0f} s")]
        if not junit.is_file():
            tail = " ".join((cp.stderr or cp.stdout).split())[-300:]
            return [_run_error(entry, f"pytest-testinfra did not run (exit {cp.returncode}): {tail}")]
        results = results_from_junit(junit.read_text(), node.name)
    return results or [_run_error(entry, "no test collected (files are named test_*.py, tests test_*)")]


def _run_error(entry: TestinfraChecks, why: str) -> Result:
    stem = _NOT_ID.sub("_", Path(entry.path).stem.lower()).strip("_") or "checks"
    return Result(f"site.{stem}__run", SITE_LAYER, "critical", ERROR, f"{entry.path}: {why}")


def node_target(
    spec: Spec, node: Node, vagrant: Callable[[], Mapping[str, VagrantHost]]
) -> tuple[str, int, str, str | None]:
    """(host, port, user, key) of a node, as gpuforge's own SSH uses them (``vagrant`` is asked lazily)."""
    if node.connector is Connector.VAGRANT:
        vh = vagrant().get(node.name)
        if vh is None:
            raise OSError(f"vagrant ssh-config has no machine {node.name}")
        return (vh.hostname, vh.port, vh.user, vh.identity_file or spec.ssh.key)
    return (node.ssh_target, spec.ssh.port, spec.ssh.user, spec.ssh.key)


def site_results(
    spec: Spec, spec_dir: Path, node: Node, vagrant: Callable[[], Mapping[str, VagrantHost]]
) -> list[Result]:
    """Every site check that targets ``node``, run one entry after the other."""
    try:
        target = node_target(spec, node, vagrant)
    except (OSError, RuntimeError) as exc:
        return [_run_error(entry, str(exc)) for entry in checks_for(spec, node)]
    return [r for entry in checks_for(spec, node) for r in run_checks(spec, spec_dir, node, entry, target)]


def blocked(results: list[Result], why: str) -> list[Result]:
    """The same results, not run: the node could not be reached."""
    return [Result(r.id, r.layer, r.severity, BLOCKED, why[:300]) for r in results]
