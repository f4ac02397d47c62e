"""Slurm: accounting (MariaDB + slurmdbd), configs, slurmctld, slurmd, tenants.

Operations run in this order across all hosts, so that every node has its new config
before the controller reconfigures or restarts, and the controller is up before slurmd:

1. accounting-db: MariaDB, the database user, slurmdbd
2. every Slurm node: packages, directories and config files (the change is classified)
3. controller: slurmctld started, reconfigured or restarted as the change needs
4. compute: slurmd started or restarted
5. controller: QOS, accounts and users through sacctmgr
"""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import deploy

from gpuforge.deploy.context import node, run_state, secrets, spec
from gpuforge.deploy.converge import (
    Directory,
    Layer,
    LayerFacts,
    Service,
    Step,
    StepKind,
    clear_pending,
    file_differs,
    record_pending,
)
from gpuforge.deploy.layers.nvidia.common import pyxis_rebuilt
from gpuforge.deploy.layers.slurm_repo import slurm_repo_layer
from gpuforge.deploy.operations.layer import converge
from gpuforge.deploy.operations.slurm_accounting import sync_accounting
from gpuforge.deploy.runstate import RunState, SlurmDecision
from gpuforge.deploy.slurm_changes import SlurmAction, classify, removed_nodes
from gpuforge.render.files import RenderedFile, Secrets
from gpuforge.render.slurm import SLURM_ETC, slurm_files, slurm_package, slurmdbd_conf, uses_nvml
from gpuforge.spec import Role, Spec, nodes_with
from gpuforge.spec.model import ConfigMode
from gpuforge.spec.nodes import Node
from gpuforge.spec.roles import deploys_for
from gpuforge.spec.slurm_packages import SlurmSource, runtime_packages

SLURM_CONF = f"{SLURM_ETC}/slurm.conf"
SLURMDBD_CONF = f"{SLURM_ETC}/slurmdbd.conf"
SLURMD_FILES = (
    f"{SLURM_ETC}/gres.conf",
    f"{SLURM_ETC}/cgroup.conf",
    f"{SLURM_ETC}/plugstack.conf",
    f"{SLURM_ETC}/plugstack.conf.d/pyxis.conf",
    "/etc/default/slurmd",
    "/etc/systemd/system/slurmd.service.d/gpuforge-configless.conf",
)
#: slurmd's files that a configless slurmd fetches from slurmctld when it starts (Slurm's
#: configless_slurm.html): on a configless cluster only the controller has them, so a change of
#: one there is a change of every slurmd's (slurm.conf's own changes are classified cluster-wide).
CONFIGLESS_SERVED = (f"{SLURM_ETC}/gres.conf", f"{SLURM_ETC}/cgroup.conf", f"{SLURM_ETC}/plugstack.conf")
#: What slurmctld reads besides slurm.conf: a change of it alone needs a reconfigure
#: (topology.conf(5): changes take effect on a restart, SIGHUP or "scontrol reconfigure").
TOPOLOGY_CONF = f"{SLURM_ETC}/topology.conf"


def accounting_layer(s: Spec, sec: Secrets, deb: bool = True) -> Layer:
    acc = s.slurm.accounting if s.slurm else None
    assert acc is not None
    conf = RenderedFile(SLURMDBD_CONF, slurmdbd_conf(s, sec), mode="0600", owner="slurm", group="slurm", secret=True)

    def create_db(facts: LayerFacts, changed: set[str]) -> list[Step]:
        # The step is idempotent and comes before slurmdbd's restart, whose pending marker is written
        # before slurmdbd.conf and cleared by the restart: a run interrupted anywhere between the
        # file and the restart leaves the marker, and the re-run makes the database and user again.
        if SLURMDBD_CONF not in changed and "slurmdbd.restart" not in facts.pending:
            return []
        # The password is read on the node from slurmdbd.conf; it never appears in a command.
        sql = (
            "CREATE DATABASE IF NOT EXISTS %s; "
            "CREATE USER IF NOT EXISTS '%s'@'localhost' IDENTIFIED BY '%s'; "
            "ALTER USER '%s'@'localhost' IDENTIFIED BY '%s'; "
            "GRANT ALL ON %s.* TO '%s'@'localhost'; FLUSH PRIVILEGES;"
        )
        db, user = acc.database, acc.db_user
        cmd = (
            f"systemctl start mariadb && pw=$(sed -n 's/^StoragePass=//p' {SLURMDBD_CONF}) && "
            f'printf "{sql}" {db} {user} "$pw" {user} "$pw" {db} {user} | mysql -u root'
        )
        return [Step(StepKind.DATABASE, f"database {db} and user {user} (password from {SLURMDBD_CONF})", cmd)]

    return Layer(
        "slurm-accounting",
        packages=("mariadb-server", slurm_package(s, "slurmdbd", deb)),
        hold_pins=True,
        directories=(Directory("/var/log/slurm", "0755", "slurm", "slurm"),),
        files=[conf],
        services=(Service("mariadb"), Service("slurmdbd", restart_on=(SLURMDBD_CONF,))),
        before_services=create_db,
        after=wait_for_slurmdbd,
    )


def wait_for_slurmdbd(facts: LayerFacts, changed: set[str]) -> list[Step]:
    unit = facts.units.get("slurmdbd") or {}
    if SLURMDBD_CONF not in changed and unit.get("ActiveState") == "active":
        return []
    return [
        Step(
            StepKind.WAIT,
            "wait for slurmdbd to listen on port 6819",
            "for i in $(seq 1 60); do ss -Hltn 'sport = :6819' | grep -q . && exit 0; sleep 1; done; "
            "echo 'slurmdbd is not listening on port 6819 after 60 s: see /var/log/slurm/slurmdbd.log' >&2; exit 1",
        )
    ]


def nvml_packages(s: Spec, n: Node) -> list[str]:
    """Slurm's NVML plugin on a GPU node whose gres.conf says ``AutoDetect=nvml`` (slurm_gpu)."""
    group = next(g for g in s.node_groups if g.name == n.group)
    if n.hardware.gpu is None or not uses_nvml(s, group):
        return []
    return [slurm_package(s, "slurm-wlm-nvml-plugin", n.os.is_deb)]


def config_layer(s: Spec, n: Node, sec: Secrets, host_name: str, run: RunState) -> Layer:
    packages: list[str] = []
    deb = n.os.is_deb
    dirs = [Directory("/var/log/slurm", "0755", "slurm", "slurm"), Directory(SLURM_ETC, "0755")]
    if n.has(Role.CONTROLLER):
        packages += [slurm_package(s, "slurmctld", deb), slurm_package(s, "slurm-client", deb)]
        dirs.append(Directory(s.slurm.state_save_location if s.slurm else "", "0755", "slurm", "slurm"))
    if n.has(Role.COMPUTE):
        packages += [slurm_package(s, "slurmd", deb), slurm_package(s, "slurm-client", deb), *nvml_packages(s, n)]
        dirs.append(Directory("/var/lib/slurm/slurmd", "0755", "root", "root"))
    if n.has(Role.LOGIN):
        packages += [slurm_package(s, "slurm-client", deb)]
    if n.has(Role.CONTROLLER) or n.has(Role.COMPUTE) or n.has(Role.LOGIN):
        packages += runtime_packages(s.slurm.source if s.slurm else SlurmSource.DISTRO, deb)
    files = [f for f in slurm_files(s, n, sec) if f.path != SLURMDBD_CONF]
    new_conf = next((f.content for f in files if f.path == SLURM_CONF), None)

    def owe(facts: LayerFacts) -> list[Step]:
        """Before the new files land: record on the node the restarts/reconfigures they will need,
        so that a run interrupted after writing them still makes them next time."""
        if new_conf is None or not isinstance(new_conf, str):
            return []
        old = facts.contents.get(SLURM_CONF)
        action, why = classify(old, new_conf) if old is not None else (SlurmAction.NONE, "")
        steps = []
        if n.has(Role.CONTROLLER) and action is not SlurmAction.NONE:
            steps.append(record_pending("slurmctld", action.value, why))
        mine = [f.path for f in files if f.path in SLURMD_FILES and file_differs(f, facts.files.get(f.path))[0]]
        if n.has(Role.COMPUTE) and (action is SlurmAction.RESTART or mine):
            steps.append(record_pending("slurmd", "restart", why if action is SlurmAction.RESTART else ", ".join(mine)))
        return steps

    def decide(facts: LayerFacts, changed: set[str]) -> list[Step]:
        if new_conf is None or not isinstance(new_conf, str):
            return []
        old = facts.contents.get(SLURM_CONF)
        action, why = classify(old, new_conf)
        gone = removed_nodes(old, new_conf)
        run.record_slurm(host_name, SlurmDecision(action, why, tuple(gone)))
        if action is SlurmAction.NONE or old is None:
            return []
        return [Step(StepKind.NOTE, f"slurm.conf change needs {action.value}: {why}")]

    return Layer(
        "slurm-config",
        packages=tuple(p for p in dict.fromkeys(packages) if p),  # "": shipped by another package (site)
        directories=tuple(dirs),
        files=files,
        read_paths=(SLURM_CONF,) if new_conf is not None else (),
        before_files=owe,
        after=decide,
        hold_pins=True,
    )


def controller_layer(s: Spec, host_name: str, run: RunState) -> Layer:
    def act(facts: LayerFacts, changed: set[str]) -> list[Step]:
        unit = facts.units.get("slurmctld") or {}
        if unit.get("ActiveState") != "active":
            return []  # service_steps starts it with the new config
        action, why = run.slurm_action()
        if "slurmctld.restart" in facts.pending:
            return []  # service_steps makes the restart the node records as pending
        if action is SlurmAction.NONE and "slurmctld.reconfigure" in facts.pending:
            action, why = SlurmAction.RECONFIGURE, "a reconfigure is pending on the node"
        if action is SlurmAction.NONE and TOPOLOGY_CONF in run.changed_paths(host_name, "slurm-config"):
            action, why = SlurmAction.RECONFIGURE, f"{TOPOLOGY_CONF} changed"
        steps = []
        gone = run.slurm_removed_nodes()
        for name in gone:
            steps.append(
                Step(
                    StepKind.DRAIN,
                    f"drain {name} (removed from the spec) and wait for its jobs",
                    f"scontrol update NodeName={name} State=DRAIN Reason='gpuforge: removed from spec' || true; "
                    f"for i in $(seq 1 {max(1, s.rollout.drain_timeout // 2)}); do "
                    f"squeue -h -w {name} 2>/dev/null | grep -q . || break; sleep 2; done",
                )
            )
        done = clear_pending("slurmctld")
        if action is SlurmAction.RESTART:
            steps.append(Step(StepKind.RESTART, f"restart slurmctld ({why})", f"systemctl restart slurmctld{done}"))
        elif action is SlurmAction.RECONFIGURE:
            steps.append(Step(StepKind.RECONFIGURE, f"scontrol reconfigure ({why})", f"scontrol reconfigure{done}"))
        return steps

    def register(facts: LayerFacts, changed: set[str]) -> list[Step]:
        unit = facts.units.get("slurmctld") or {}
        if s.slurm is None or not s.slurm.accounting.enabled or unit.get("ActiveState") == "active":
            return []
        # slurmctld must find its cluster in slurmdbd at its first start, or it never
        # receives the associations (jobs fail with "Invalid account").
        name = s.cluster.name
        return [
            Step(
                StepKind.SACCTMGR,
                f"register cluster {name} in slurmdbd",
                f"sacctmgr -nP show cluster format=cluster | grep -qx {name} || sacctmgr -i add cluster {name}",
            )
        ]

    return Layer("slurm-controller", services=(Service("slurmctld"),), before_services=register, after=act)


def served_changes(s: Spec, run: RunState) -> set[str]:
    """slurmd's files that changed on the controllers of a configless cluster in this run (the
    slurm-config operation ran on every node before slurmd's)."""
    if s.slurm is None or s.slurm.config_mode is not ConfigMode.CONFIGLESS:
        return set()
    controllers = [n.name for n in nodes_with(s, Role.CONTROLLER)]
    return {p for c in controllers for p in run.changed_paths(c, "slurm-config") if p in CONFIGLESS_SERVED}


def compute_layer(s: Spec, host_name: str, run: RunState) -> Layer:
    def act(facts: LayerFacts, changed: set[str]) -> list[Step]:
        unit = facts.units.get("slurmd") or {}
        if unit.get("ActiveState") != "active" or "slurmd.restart" in facts.pending:
            return []  # service_steps starts it, or makes the restart the node records as pending
        action, why = run.slurm_action()
        mine = run.changed_paths(host_name, "slurm-config") & set(SLURMD_FILES)
        mine |= {f"{p} (served by slurmctld)" for p in served_changes(s, run) - mine}
        if pyxis_rebuilt(run, host_name):
            mine.add("spank_pyxis.so (rebuilt)")
        done = clear_pending("slurmd")
        if action is SlurmAction.RESTART:
            return [Step(StepKind.RESTART, f"restart slurmd ({why})", f"systemctl restart slurmd{done}")]
        if mine:
            what = ", ".join(sorted(mine))
            return [Step(StepKind.RESTART, f"restart slurmd ({what} changed)", f"systemctl restart slurmd{done}")]
        return []

    return Layer("slurm-compute", services=(Service("slurmd"),), after=act)


@deploy("gpuforge slurm")
def slurm() -> None:
    s = spec()
    n = node()
    run = run_state()
    on = s.slurm is not None and "slurm" in deploys_for(n)
    sec = secrets() if on else None
    acct = on and s.slurm is not None and s.slurm.accounting.enabled
    db = acct and sec is not None and n.has(Role.ACCOUNTING_DB)
    converge(name="slurm: gpuforge's build of Slurm (repository)", layer=slurm_repo_layer(s, n))
    converge(
        name="slurm: accounting database and slurmdbd",
        layer=accounting_layer(s, sec, n.os.is_deb) if db and sec else Layer.empty("acct"),
    )
    converge(
        name="slurm: packages and configs",
        layer=config_layer(s, n, sec, host.name, run) if on and sec else Layer.empty("slurm-config"),
    )
    converge(
        name="slurm: slurmctld",
        layer=controller_layer(s, host.name, run) if on and n.has(Role.CONTROLLER) else Layer.empty("slurm-controller"),
    )
    converge(
        name="slurm: slurmd",
        layer=compute_layer(s, host.name, run) if on and n.has(Role.COMPUTE) else Layer.empty("slurm-compute"),
    )
    sync = acct and n.has(Role.CONTROLLER) and run.converges(host.name, "slurm-accounting-sync")  # not in images
    sync_accounting(name="slurm: QOS, accounts and users", spec=s, enabled=sync)
