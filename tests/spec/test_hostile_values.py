"""No spec value leaves its place: every string field of the model, given hostile text, is refused
naming that field, or is accepted and stays one value in its place in every rendered file and in
every planned shell command, as each format's own parser reads them.

The fields come from the model itself (``Spec.model_fields``, tests/spec/hostile.py), so a new field
must be set in one of the two base specs (tests/spec/fixtures/every_field_*.yaml) or the first test
fails. Each field gets the fixed hostile values (the issue's reproducers among them) and a few that
hypothesis draws. An accepted value's render is compared with the base spec's, file by file: a
changed file is read by its real parser (``apt-config dump``, ``apt-get --print-uris update``,
``systemd-analyze verify`` and systemd's word splitting, Slurm's key=value rules, ``tomllib``,
``yaml.safe_load``, ``json``, ``ast``, ...) and must keep the base file's shape (the same keys, lines,
words, nodes), with the value inside one of its leaves. Planned commands (a dry-run plan on
simulated nodes, and the sacctmgr steps of a fresh slurmdbd) must pass ``bash -n`` and keep the base
plan's words and operators, command by command.
"""

from __future__ import annotations

import functools
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuforge.deploy.operations.slurm_accounting import batch_command, plan_accounting
from gpuforge.extensions.ansible_inventory import ansible_inventory
from gpuforge.orchestrate.plan import plan
from gpuforge.render import pxe, render_cluster
from gpuforge.render.files import RenderedFile
from gpuforge.spec import SpecError, parse_spec
from gpuforge.spec.cluster import load_cluster
from gpuforge.spec.model import Spec
from tests import yaml_text
from tests.converge.simulated import simulated, write_simulated_spec
from tests.spec.hostile import (
    FIXED,
    KEY,
    Location,
    Parsed,
    bash_syntax_errors,
    command_shape,
    field_path,
    hostile_values,
    locations,
    original,
    parse_file,
    place,
    spec_value,
    string_fields,
    with_value,
)

FIXTURES = Path(__file__).resolve().parent / "fixtures"
BASES: dict[str, dict[str, Any]] = {
    name: yaml.safe_load((FIXTURES / f"every_field_{name}.yaml").read_text())
    for name in ("slurm", "k8s", "slurm_build")
}
PATTERNS = sorted(set(string_fields(Spec)))
#: Every field's first place in each base spec that sets it.
CASES = [
    (base, loc) for pattern in PATTERNS for base, data in BASES.items() for loc in list(locations(data, pattern))[:1]
]
RANDOM_EXAMPLES = 3


def case_id(case: tuple[str, Location]) -> str:
    base, loc = case
    return f"{base}:" + ".".join("{key}" if p == KEY else str(p) for p in loc)


def test_every_string_field_of_the_model_is_set_in_a_base_spec() -> None:
    missing = [".".join(p) for p in PATTERNS if not any(True for d in BASES.values() for _ in locations(d, p))]
    assert not missing, f"set these fields in tests/spec/fixtures/every_field_*.yaml: {missing}"
    assert len(PATTERNS) > 120, len(PATTERNS)


# --------------------------------------------------------------------------- rendered files


@functools.cache
def parsed(path: str, data: bytes) -> Parsed:
    return parse_file(path, data)


#: The boot server's files (``gpuforge provision --render``: dnsmasq's configuration, the iPXE scripts),
#: compared as the files of one more "node".
BOOT_SERVER = "(boot server)"


def every_file(spec: Spec) -> dict[str, list[RenderedFile]]:
    """Every node's files, and the boot server's."""
    boot = [RenderedFile(path, text) for path, text in pxe.rendered_files(spec).items()]
    return {**render_cluster(spec), BOOT_SERVER: boot}


@functools.cache
def base_render(base: str) -> dict[str, dict[str, bytes | None]]:
    """The base spec's files per node (None: secret or streamed, not compared), each one parsed."""
    files = every_file(parse_spec(yaml_text.dump(BASES[base])))
    out: dict[str, dict[str, bytes | None]] = {}
    for node, rendered in files.items():
        out[node] = {f.path: None if f.secret or f.streamed else f.data for f in rendered}
        for f in rendered:
            if not (f.secret or f.streamed):
                parsed(f.path, f.data)
    return out


def accepted_or_refused(base: str, loc: Location, value: str) -> Spec | None:
    """The spec with ``value`` at ``loc``, or None when a SpecError refuses it naming that field."""
    text = yaml_text.dump(with_value(BASES[base], loc, value), allow_unicode=True)
    try:
        return parse_spec(text)
    except SpecError as e:
        assert refusal_names_the_field(e, loc), (
            f"{shown(value)} at {case_id((base, loc))} was refused, but no problem names the field: {e.format()[:2000]}"
        )
        return None


def refusal_names_the_field(error: SpecError, loc: Location) -> bool:
    """A problem is at the field (or its list or dict), or the whole file is refused by a limit
    on every value (its line is given: ``gpuforge.spec.limits``)."""
    where = field_path(loc)
    for issue in error.issues:
        if issue.loc == () and issue.message.startswith("refused:"):
            return True
        at_or_below = issue.loc[: len(where)] == where
        at_its_parent = len(issue.loc) >= min(len(where), 2) and where[: len(issue.loc)] == issue.loc
        if at_or_below or at_its_parent:
            return True
    return False


def shown(value: str | None) -> str:
    return repr(value if value is None or len(value) < 120 else value[:100] + "...")


def assert_files_keep_their_shape(base: str, loc: Location, spec: Spec, value: str | None) -> None:
    want = base_render(base)
    got = every_file(spec)
    assert list(got) == list(want), f"{case_id((base, loc))}: the nodes changed"
    for node, files in got.items():
        assert sorted(f.path for f in files) == sorted(want[node]), f"{node}: the set of files changed"
        for f in files:
            before = want[node][f.path]
            if before is None or f.data == before:
                continue
            now, then = parsed(f.path, f.data), parsed(f.path, before)
            assert now.shape == then.shape, (
                f"{case_id((base, loc))}={shown(value)}: {f.path} on {node} changed shape:\n{f.data.decode()[:3000]}"
            )
            if value and len(value) > 2 and value in f.data.decode():
                assert any(value in leaf for leaf in now.leaves), (
                    f"{case_id((base, loc))}={shown(value)}: {f.path} on {node} does not read it back as one value"
                )


def check_render(base: str, loc: Location, value: str) -> None:
    spec = accepted_or_refused(base, loc, value)
    if spec is not None:
        assert_files_keep_their_shape(base, loc, spec, spec_value(spec, loc))
        assert_inventory_is_never_templated(spec)


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_the_fixed_hostile_values_are_refused_or_stay_in_place(case: tuple[str, Location]) -> None:
    base, loc = case
    orig = original(BASES[base], loc)
    for fragment, where in FIXED:
        check_render(base, loc, place(orig, fragment, where))


@pytest.mark.parametrize("case", CASES, ids=case_id)
@settings(max_examples=RANDOM_EXAMPLES, deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck))  # fmt: skip
@given(data=st.data())
def test_drawn_hostile_values_are_refused_or_stay_in_place(case: tuple[str, Location], data: st.DataObject) -> None:
    base, loc = case
    check_render(base, loc, data.draw(hostile_values(original(BASES[base], loc)), label="value"))


# --------------------------------------------------------------------------- the Ansible inventory


def assert_inventory_is_never_templated(spec: Spec) -> None:
    """Every string variable of ``gpuforge inventory``'s output is marked unsafe (never templated)."""
    doc = ansible_inventory(spec, vagrant={})["all"]
    for scope in [*doc["hosts"].values(), doc["vars"]]:
        for name, value in scope.items():
            assert not isinstance(value, str), f"inventory variable {name}={value!r} is not marked unsafe"


# --------------------------------------------------------------------------- planned commands

#: Fields that reach shell commands (package sources, CIDRs, addresses, names, sacctmgr's text).
COMMAND_CASES = [
    ("k8s", ("sources", "apt_proxy")),
    ("k8s", ("sources", "mirrors", "artifacts")),
    ("k8s", ("sources", "mirrors", "nvidia_cuda")),
    ("k8s", ("kubernetes", "pod_cidr")),
    ("k8s", ("kubernetes", "service_cidr")),
    ("k8s", ("kubernetes", "api_endpoint")),
    ("k8s", ("kubernetes", "batch_queue", "tenants", 0, "namespace")),
    ("k8s", ("node_groups", 1, "addresses", 1)),
    ("k8s", ("node_groups", 1, "hosts")),
    ("k8s", ("mig", "configs", "all-1g", KEY)),
    ("slurm", ("cluster", "name")),
    ("slurm", ("slurm", "accounts", 0, "description")),
    ("slurm", ("slurm", "accounts", 0, "organization")),
    ("slurm", ("slurm", "accounts", 0, "users", 0)),
]
PLAN_EXAMPLES = 2
_BASE_PLANS: dict[str, dict[str, list[str]]] = {}


def planned_commands(data: dict[str, Any], where: Path) -> dict[str, list[str]]:
    """Every shell command a dry-run plan of ``data`` would send, per node (simulated nodes), and
    the sacctmgr steps for a slurmdbd that knows nothing yet."""
    where = Path(tempfile.mkdtemp(prefix=where.name, dir=where.parent))
    data = {k: v for k, v in data.items() if k != "site"}  # site content and the bundle: not on disk here
    data["sources"] = {k: v for k, v in data["sources"].items() if k != "bundle_dir"}
    path = write_simulated_spec(data, where, "spec.yaml")
    result = plan(load_cluster(path))
    assert not result.errors, result.errors
    out = {
        node: [s["command"] for op in host["operations"] for s in op["steps"] if s.get("command")]
        for node, host in result.as_dict()["hosts"].items()
    }
    spec = parse_spec(path.read_text())
    steps = plan_accounting(spec, {"assoc": [], "qos": [], "account": [], "error": None})  # type: ignore[typeddict-item]
    out["sacctmgr"] = [s.command for s in steps if s.command] + ([batch_command(steps)] if steps else [])
    return out


def assert_commands_keep_their_words(base: str, loc: Location, got: dict[str, list[str]]) -> None:
    want = _BASE_PLANS[base]
    assert sorted(got) == sorted(want), f"{case_id((base, loc))}: the planned nodes changed"
    for node, commands in got.items():
        errors = bash_syntax_errors(commands)
        assert not errors, f"{case_id((base, loc))}: {node}: bash -n: {errors}"
        assert len(commands) == len(want[node]), f"{case_id((base, loc))}: {node}: the number of commands changed"
        for now, then in zip(commands, want[node], strict=True):
            assert command_shape(now).shape == command_shape(then).shape, (
                f"{case_id((base, loc))}: {node}: the words or operators of a command changed:\n{now}\nwas:\n{then}"
            )


@pytest.fixture
def simulated_plans(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Plans run on simulated nodes, state under ``tmp_path``; the base plans made once."""
    monkeypatch.setenv("GPUFORGE_STATE_DIR", str(tmp_path / "state"))
    simulated(monkeypatch, tmp_path)
    for base in BASES:
        if base not in _BASE_PLANS:
            _BASE_PLANS[base] = planned_commands(BASES[base], tmp_path / "base")
    return tmp_path


def check_commands(base: str, loc: Location, value: str, where: Path) -> bool:
    """Plan with ``value`` at ``loc`` (when the spec accepts it) and compare with the base plan."""
    if accepted_or_refused(base, loc, value) is None:
        return False
    got = planned_commands(with_value(BASES[base], loc, value), where / "example")
    assert_commands_keep_their_words(base, loc, got)
    return True


@pytest.mark.parametrize("case", COMMAND_CASES, ids=case_id)
def test_planned_commands_keep_the_fixed_hostile_values_one_word(
    case: tuple[str, Location], simulated_plans: Path
) -> None:
    base, loc = case
    orig = original(BASES[base], loc)
    for fragment, where in FIXED:
        check_commands(base, loc, place(orig, fragment, where), simulated_plans)


@pytest.mark.parametrize("case", COMMAND_CASES, ids=case_id)
@settings(max_examples=PLAN_EXAMPLES, deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck))  # fmt: skip
@given(data=st.data())
def test_planned_commands_keep_drawn_hostile_values_one_word(
    case: tuple[str, Location], data: st.DataObject, simulated_plans: Path
) -> None:
    base, loc = case
    value = data.draw(hostile_values(original(BASES[base], loc)), label="value")
    check_commands(base, loc, value, simulated_plans)
