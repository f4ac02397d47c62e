"""Run one site Ansible step (a role or a playbook) with ansible-runner's Python API.

Invariants:

- the inventory is the spec's (``ansible_inventory``), host keys are checked, and the run is
  limited to the nodes it is given (never a node gpuforge did not select or that already failed);
- ansible-runner's private data dir is made with mode 0700 and removed after the run: extra vars,
  the inventory and the run's output never stay on the control host;
- per host, the outcome is read from the run's events: changed tasks, the first failing task
  with its message (``ignore_errors`` tasks are not failures), unreachable hosts; a run that fails
  before any host reports (a syntax error, a missing module) fails every host it was given with the
  end of Ansible's output;
- ``check=True`` is Ansible's check mode with ``--diff``: nothing changes on the nodes;
- every string gpuforge hands to Ansible (the role's path, the extra vars, the inventory) is marked
  unsafe (``ansible_inventory.unsafe``), so Ansible never templates it on the control host (the
  spec's folder name is not checked by the spec, so this is the guard, not the spec's checks).
"""

from __future__ import annotations

import difflib
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuforge.extensions.ansible_inventory import ansible_inventory, target_groups, unsafe
from gpuforge.probes.vagrant import VagrantHost
from gpuforge.spec import Spec
from gpuforge.spec.extensions import AnsibleStep

INSTALL_HINT = "pip install 'gpuforge[ansible]' (ansible-core and ansible-runner)"
STEP_TIMEOUT_S = 3600


class AnsibleMissing(RuntimeError):
    """The spec names Ansible steps but ansible-runner / ansible-playbook is not installed."""


@dataclass
class HostOutcome:
    """What one step did on one host."""

    ok: int = 0
    changed: list[str] = field(default_factory=list)
    failed: str | None = None
    diffs: list[str] = field(default_factory=list)


@dataclass
class StepOutcome:
    """One step on its hosts; ``error`` when Ansible itself did not run."""

    step: str
    hosts: dict[str, HostOutcome]
    error: str | None = None


def ansible_playbook_binary() -> str:
    """ansible-playbook beside this Python (a venv), else on PATH; AnsibleMissing when neither."""
    try:
        import ansible_runner  # noqa: F401
    except ImportError:
        raise AnsibleMissing(
            f"the spec has site.ansible steps, but ansible-runner is not installed: {INSTALL_HINT}"
        ) from None
    beside = Path(sys.executable).parent / "ansible-playbook"
    found = str(beside) if beside.is_file() else shutil.which("ansible-playbook")
    if not found:
        raise AnsibleMissing(f"the spec has site.ansible steps, but ansible-playbook is not installed: {INSTALL_HINT}")
    return found


def role_play(spec: Spec, step: AnsibleStep, spec_dir: Path) -> list[dict[str, Any]]:
    """The one play that applies a role step to its target groups; the role's path is unsafe text."""
    assert step.role is not None
    return [
        {
            "name": f"gpuforge site step {step.name}",
            "hosts": ":".join(target_groups(spec, step.targets)),
            "gather_facts": True,
            "become": step.become and spec.ssh.user != "root",
            "roles": [{"role": unsafe(str((spec_dir / step.role).resolve()))}],
        }
    ]


def _diff_text(diff: Any) -> str:
    """Ansible's ``diff`` result (one dict or a list) as unified diff text."""
    parts = diff if isinstance(diff, list) else [diff]
    out = []
    for d in parts:
        if not isinstance(d, dict):
            continue
        if "prepared" in d:
            out.append(str(d["prepared"]))
        elif "before" in d or "after" in d:
            before = str(d.get("before", "")).splitlines(keepends=True)
            after = str(d.get("after", "")).splitlines(keepends=True)
            out.append(
                "".join(
                    difflib.unified_diff(
                        before,
                        after,
                        str(d.get("before_header", "before")),
                        str(d.get("after_header", "after")),
                    )
                )
            )
    return "".join(out)


def outcome_from_events(events: list[dict[str, Any]], hosts: list[str]) -> dict[str, HostOutcome]:
    """Per-host outcome from ansible-runner events (``runner_on_*``); pure, for tests."""
    by_host = {h: HostOutcome() for h in hosts}
    for ev in events:
        kind = ev.get("event", "")
        data = ev.get("event_data") or {}
        host = data.get("host")
        if host not in by_host:
            continue
        out = by_host[host]
        task = str(data.get("task") or data.get("task_action") or "?")
        res = data.get("res") or {}
        if kind == "runner_on_ok":
            out.ok += 1
            if res.get("changed"):
                out.changed.append(task)
            if res.get("diff"):
                text = _diff_text(res["diff"])
                if text.strip():
                    out.diffs.append(f"{task}:\n{text}")
        elif kind == "runner_on_failed" and not data.get("ignore_errors"):
            if out.failed is None:
                msg = str(res.get("msg") or "failed").strip()
                err_lines = str(res.get("stderr") or "").strip().splitlines()
                if err_lines and err_lines[-1] not in msg:
                    msg = f"{msg}: {err_lines[-1]}"
                out.failed = f"{task}: {' '.join(msg.split())[:300]}"
        elif kind == "runner_on_unreachable" and out.failed is None:
            msg = " ".join(str(res.get("msg") or "unreachable").split())
            out.failed = f"unreachable: {msg[:300]}"
    return by_host


def run_step(
    spec: Spec,
    spec_dir: Path,
    step: AnsibleStep,
    hosts: list[str],
    *,
    check: bool = False,
    vagrant: dict[str, VagrantHost] | None = None,
    on_event: Callable[[str], None] | None = None,
) -> StepOutcome:
    """Run ``step`` on ``hosts`` (the nodes it targets that are still in the run)."""
    say = on_event or (lambda _m: None)
    binary = ansible_playbook_binary()
    import ansible_runner

    if not hosts:
        return StepOutcome(step.name, {})
    playbook: Any = role_play(spec, step, spec_dir) if step.role else str((spec_dir / (step.playbook or "")).resolve())
    events: list[dict[str, Any]] = []

    def handle(ev: dict[str, Any]) -> bool:
        events.append(ev)
        data = ev.get("event_data") or {}
        if ev.get("event") in ("runner_on_failed", "runner_on_unreachable") and not data.get("ignore_errors"):
            say(f"ansible {step.name}: {data.get('host')}: {data.get('task')} failed")
        elif ev.get("event") == "runner_on_ok":
            done = "changed" if (data.get("res") or {}).get("changed") else "ok"
            say(f"ansible {step.name}: {data.get('host')}: {data.get('task')} {done}")
        return False  # keep nothing on disk beyond what ansible-runner needs

    envvars = {
        "ANSIBLE_HOST_KEY_CHECKING": "True",
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_RETRY_FILES_ENABLED": "False",
        "ANSIBLE_STDOUT_CALLBACK": "default",
        # ansible-runner starts ansible-playbook by name (its 'binary' option skips the playbook):
        # the one found here comes first on the PATH it is started with.
        "PATH": os.pathsep.join([str(Path(binary).parent), os.environ.get("PATH", os.defpath)]),
    }
    if spec.ssh.user != "root" and step.become:
        envvars["ANSIBLE_BECOME"] = "True"
    work = Path(tempfile.mkdtemp(prefix="gpuforge-ansible-"))  # mode 0700
    try:
        (work / "project").mkdir(mode=0o700)
        r = ansible_runner.run(
            private_data_dir=str(work),
            playbook=playbook,
            inventory=ansible_inventory(spec, hosts, vagrant),
            limit=",".join(hosts),
            extravars=unsafe(dict(step.vars)) or None,
            envvars=envvars,
            cmdline="--check --diff" if check else None,
            quiet=True,
            event_handler=handle,
            timeout=STEP_TIMEOUT_S,
            settings={"suppress_ansible_output": True},
        )
        outcome = StepOutcome(step.name, outcome_from_events(events, hosts))
        if r.rc != 0 and not any(o.failed for o in outcome.hosts.values()):
            tail = " / ".join(ln for ln in r.stdout.read().strip().splitlines()[-4:] if ln.strip())
            why = f"ansible-playbook exited {r.rc} ({r.status}): {tail[:400]}"
            outcome.error = why
            for o in outcome.hosts.values():
                o.failed = o.failed or why
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return outcome
