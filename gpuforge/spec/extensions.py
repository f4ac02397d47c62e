"""The site's own content in the spec: Ansible roles and playbooks, testinfra checks.

Each value is checked for where it lands:

- paths are relative to the spec file and stay inside its folder (no ``..`` out, no absolute
  path): they are read on the control host by ansible-runner or pytest;
- Ansible variables reach ansible-runner as extra vars (a JSON file, never a command line);
  Ansible templates strings, so no value may hold Jinja delimiters (``{{``, ``{%``, ``{#``:
  a lookup would run a command on the control host), and no name may start with ``ansible_``
  (those override the connection: ``ansible_ssh_common_args`` could run a ProxyCommand);
- role and playbook paths hold no Jinja delimiter either (Ansible templates a play's role name).
"""

from __future__ import annotations

import re
from pathlib import Path, PurePosixPath
from typing import Annotated, Literal

from pydantic import AfterValidator, JsonValue, field_validator

from gpuforge.spec.policy import live
from gpuforge.spec.strict import Name, StrictModel

#: Layers an Ansible step may follow: gpuforge.spec.roles.LAYER_ORDER (a test keeps them equal).
LayerName = Literal[
    "base", "packages", "storage", "munge", "nvidia", "fabric", "kubernetes", "slurm", "monitoring", "health"
]
_VAR_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
_JINJA = ("{{", "{%", "{#", "}}", "%}", "#}")
#: Names Ansible itself sets or reads as connection/privilege settings.
RESERVED_VAR_PREFIXES = ("ansible_", "hostvars", "groups", "inventory_", "play_hosts", "omit")
MAX_VAR_DEPTH = 8


def relative_path(value: str) -> str:
    """A path relative to the spec file that stays inside the spec's folder."""
    p = PurePosixPath(value)
    if not value or len(value) > 1024 or value.startswith("-") or p.is_absolute() or "\\" in value:
        raise ValueError(f"{value!r}: a path relative to the spec file (not absolute, no leading '-')")
    if ".." in p.parts:
        raise ValueError(f"{value!r}: '..' would leave the spec's folder; keep site content beside the spec")
    return value


RelativePath = Annotated[str, AfterValidator(relative_path)]


def untemplated_path(value: str) -> str:
    """A role or playbook path holds no Jinja delimiter: Ansible templates a play's role name
    before it connects (a ``{{ lookup('pipe', ...) }}`` folder would run on the control host)."""
    if any(d in value for d in _JINJA[:3]):
        raise ValueError(f"{value!r} holds a Jinja delimiter ({{{{, {{% or {{#); Ansible would evaluate it")
    return value


#: A path Ansible is given (``site.ansible[].role`` / ``.playbook``).
AnsiblePath = Annotated[str, AfterValidator(relative_path), AfterValidator(untemplated_path)]


def _check_var(value: JsonValue, where: str, depth: int = 0) -> None:
    if depth > MAX_VAR_DEPTH:
        raise ValueError(f"{where}: nested deeper than {MAX_VAR_DEPTH} levels")
    if isinstance(value, str):
        if any(d in value for d in _JINJA):
            raise ValueError(
                f"{where}: {value!r} holds a Jinja delimiter ({{{{ }}}}, {{% %}} or {{# #}}); Ansible would "
                "evaluate it on the control host. Put logic in the role, not in the spec"
            )
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _check_var(item, f"{where}[{i}]", depth + 1)
    elif isinstance(value, dict):
        for key, item in value.items():
            if any(d in key for d in _JINJA):
                raise ValueError(f"{where}: key {key!r} holds a Jinja delimiter")
            _check_var(item, f"{where}.{key}", depth + 1)


def target_names(v: list[str]) -> list[str]:
    """Targets are role or node group names (checked against the spec by ``site_rules``)."""
    bad = [t for t in v if not re.fullmatch(r"[a-z][a-z0-9_-]{0,62}", t)]
    if bad:
        raise ValueError(f"{bad}: targets are role or node group names")
    return v


class AnsibleStep(StrictModel):
    """A site's Ansible role or playbook, run by ansible-runner after one of gpuforge's layers."""

    name: Name = live(description="Name shown in progress and reports")
    role: AnsiblePath | None = live(None, "Role directory (tasks/main.yml inside), relative to the spec file")
    playbook: AnsiblePath | None = live(None, "Playbook file, relative to the spec file")
    targets: list[str] = live(
        default_factory=list, description="Node roles (compute, controller, ...) or node group names; default: all"
    )
    vars: dict[str, JsonValue] = live(
        default_factory=dict, description="Variables (extra vars): no Jinja, no names starting with ansible_"
    )
    after: LayerName = live("health", "The gpuforge layer this step runs after (every node's copy of it)")
    become: bool = live(True, "Run the role's tasks as root (become)")

    @field_validator("vars")
    @classmethod
    def _vars(cls, v: dict[str, JsonValue]) -> dict[str, JsonValue]:
        for key, value in v.items():
            if not _VAR_NAME.fullmatch(key):
                raise ValueError(f"{key!r} is not an Ansible variable name (letters, digits, _; not a digit first)")
            if key.startswith(RESERVED_VAR_PREFIXES):
                raise ValueError(f"{key}: names starting with {', '.join(RESERVED_VAR_PREFIXES)} are Ansible's own")
            _check_var(value, key)
        return v

    @field_validator("targets")
    @classmethod
    def _targets(cls, v: list[str]) -> list[str]:
        return target_names(v)


class TestinfraChecks(StrictModel):
    """A folder (or file) of testinfra tests run against nodes by ``gpuforge validate``."""

    __test__ = False  # not a pytest class

    path: RelativePath = live(description="test_*.py file or folder of them, relative to the spec file")
    targets: list[str] = live(default_factory=list, description="Node roles or node group names; default: all")

    @field_validator("targets")
    @classmethod
    def _targets(cls, v: list[str]) -> list[str]:
        return target_names(v)


class Site(StrictModel):
    """The site's own content, run from the same spec, inventory and SSH settings."""

    ansible: list[AnsibleStep] = live(default_factory=list, description="Ansible roles and playbooks (ansible-runner)")
    testinfra: list[TestinfraChecks] = live(
        default_factory=list, description="testinfra checks run by validate (layer 'site')"
    )


def missing_site_files(site: Site, base_dir: Path) -> list[tuple[tuple[str | int, ...], str]]:
    """(location, problem) for every site path that is not there (or leaves ``base_dir`` by a link)."""
    problems: list[tuple[tuple[str | int, ...], str]] = []
    root = base_dir.resolve()

    def check(loc: tuple[str | int, ...], rel: str, want: str) -> None:
        full = (root / rel).resolve()
        if not full.is_relative_to(root):
            problems.append((loc, f"{rel} leads outside the spec's folder (a symbolic link?)"))
        elif want == "role" and not (full / "tasks" / "main.yml").is_file():
            problems.append((loc, f"{rel}: no role there ({full / 'tasks' / 'main.yml'} is missing)"))
        elif want == "file" and not full.is_file():
            problems.append((loc, f"{rel}: no such file beside the spec"))
        elif want == "tests" and not (full.is_dir() or full.is_file()):
            problems.append((loc, f"{rel}: no such file or folder beside the spec"))

    for i, step in enumerate(site.ansible):
        if step.role:
            check(("site", "ansible", i, "role"), step.role, "role")
        if step.playbook:
            check(("site", "ansible", i, "playbook"), step.playbook, "file")
    for i, checks in enumerate(site.testinfra):
        check(("site", "testinfra", i, "path"), checks.path, "tests")
    return problems
