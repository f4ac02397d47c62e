"""Slurm commands of a campaign, run on the controller: submit, watch, cancel, drain, move, resume.

Pure builders and parsers (flags: :data:`gpuforge.acceptance.tools.SOURCES`). Invariants:

- A node is drained only where it is not already out of service for another reason: the check
  and the drain are one shell snippet on the controller (:func:`drain_command`), so an operator's
  drain (any reason without a gpuforge acceptance tag) is never replaced, and never resumed.
- :func:`resume_command` resumes a node only while its reason carries one of :data:`OUR_TAGS`.
- Every value reaching a command is a node, partition or reservation name from the spec (types
  checked there) or a reason text made safe by :func:`reason_text`, and is quoted for ``sh``.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from gpuforge.spec import hostlist

#: batch.OUTPUT_DIR: root's folder on the batch host where the job's output is written and read back.
JOB_OUTPUT_DIR = "/var/lib/gpuforge"

ACCEPT_TAG = "gpuforge: accept:"
REPLACE_TAG = "gpuforge: replace:"
OUR_TAGS = (ACCEPT_TAG, REPLACE_TAG)
MAX_REASON = 200
#: Job states after which a job runs no more (squeue(1)/scontrol(1) JOB STATE CODES).
DONE_STATES = frozenset({"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "OUT_OF_MEMORY",
                         "BOOT_FAIL", "DEADLINE", "SPECIAL_EXIT", "REVOKED"})  # fmt: skip
OUT_OF_SERVICE = ("drain", "down", "fail", "maint", "unknown", "not_responding", "future")
#: States of a node in a maintenance reservation: in service for jobs of that reservation.
RESERVED = ("maint", "reserved")


def reason_text(tag: str, text: str) -> str:
    """``<tag> <text>`` on one line, no quotes, backslashes, ``$`` or ``|``, at most :data:`MAX_REASON` characters."""
    body = re.sub(r"\s+", " ", re.sub(r"[\"'`\\$]", "", text).replace("|", "/")).strip()
    full = f"{tag} {body}"
    return full if len(full) <= MAX_REASON else full[: MAX_REASON - 3] + "..."


# --------------------------------------------------------------------------- jobs


def submit_command(scripts: dict[str, str]) -> str:
    """One shell script that submits every group's batch script (written to a private temporary
    folder first, ``sbatch --parsable FILE``; sbatch keeps its own copy): ``GFJOB <group> <id or error>``."""
    lines = ["d=$(mktemp -d) || exit 1", "trap 'rm -rf \"$d\"' EXIT"]
    for i, (group, script) in enumerate(scripts.items()):
        end = f"GFEOF{i}"
        assert end not in script
        lines += [f"cat >\"$d/{i}.sh\" <<'{end}'", script.rstrip("\n"), end]
        lines.append(f'printf "GFJOB %s %s\\n" {shlex.quote(group)} "$(sbatch --parsable "$d/{i}.sh" 2>&1)"')
    return "\n".join(lines)


def parse_submitted(text: str) -> dict[str, tuple[str | None, str]]:
    """Per group: (job id or None, what sbatch said)."""
    out: dict[str, tuple[str | None, str]] = {}
    for line in text.splitlines():
        if line.startswith("GFJOB "):
            _, group, rest = ([*line.split(" ", 2), ""])[:3]
            first = rest.strip().split(";")[0]
            out[group] = (first if first.isdigit() else None, rest.strip())
    return out


def jobs_command(job_ids: list[str]) -> str:
    """``scontrol -o show job`` of each job, one marked line each."""
    return "; ".join(f'echo "GFSHOW {j} $(scontrol -o show job {j} 2>&1 | head -n 1)"' for j in job_ids)


@dataclass(frozen=True)
class JobState:
    job_id: str
    state: str
    reason: str
    batch_host: str | None
    exit_code: str

    @property
    def done(self) -> bool:
        return self.state in DONE_STATES


def parse_jobs(text: str) -> dict[str, JobState]:
    """Per job id: its state (``GONE`` when Slurm no longer knows it), reason, batch host, exit code."""
    out: dict[str, JobState] = {}
    for line in text.splitlines():
        if not line.startswith("GFSHOW "):
            continue
        _, job, rest = ([*line.split(" ", 2), ""])[:3]
        fields = dict(re.findall(r"(\w+)=(\S*)", rest))
        state = fields.get("JobState", "GONE" if "Invalid job id" in rest or not rest.strip() else "UNKNOWN")
        host = fields.get("BatchHost")
        out[job] = JobState(job, state, fields.get("Reason", rest.strip()[:200]),
                            host if host and host != "(null)" else None, fields.get("ExitCode", ""))  # fmt: skip
    return out


def cancel_command(job_ids: list[str]) -> str:
    return "scancel " + " ".join(shlex.quote(j) for j in job_ids) if job_ids else "true"


def output_command(job_id: str, remove: bool = True) -> str:
    """The job's output file on its batch host (``cat``), removed afterwards unless ``remove`` is off."""
    path = f"{JOB_OUTPUT_DIR}/gpuforge-accept-{int(job_id)}.out"  # batch.OUTPUT_DIR (a test keeps them equal)
    return f"cat {path}" + (f" && rm -f {path}" if remove else "")


# --------------------------------------------------------------------------- nodes


def states_command(nodes: list[str]) -> str:
    """One ``name|state|reason|partition`` line per node and partition (sinfo -N)."""
    return f"sinfo -h -N -n {shlex.quote(hostlist.compress(nodes))} -o '%N|%T|%E|%P'"


@dataclass(frozen=True)
class NodeState:
    name: str
    state: str
    reason: str
    partitions: tuple[str, ...]

    @property
    def in_service(self) -> bool:
        return not any(word in self.state.lower() for word in OUT_OF_SERVICE)

    def usable(self, reservation: bool) -> bool:
        """In service, or (in a reservation's job) only reserved for maintenance."""
        low = self.state.lower()
        return self.in_service or (reservation and not any(w in low for w in OUT_OF_SERVICE if w not in RESERVED))

    @property
    def ours(self) -> bool:
        return self.reason.startswith(OUR_TAGS)


def parse_states(text: str) -> dict[str, NodeState]:
    found: dict[str, NodeState] = {}
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) < 4 or not parts[0]:
            continue
        name, state, reason, part = parts[0], parts[1], "|".join(parts[2:-1]).strip(), parts[-1].rstrip("*")
        reason = "" if reason in ("none", "(null)") else reason
        prev = found.get(name)
        partitions = (prev.partitions if prev else ()) + (part,)
        found[name] = NodeState(name, state, reason, partitions)
    return found


def drain_command(node: str, reason: str) -> str:
    """Drain ``node`` with ``reason`` unless it is out of service for a reason not of gpuforge's acceptance:
    ``GFDRAIN <node> drained|kept|error <detail>`` (a subshell: commands for many nodes join with newlines)."""
    n, r = shlex.quote(node), shlex.quote(reason)
    ours = "|".join(f'"{tag}"*' for tag in OUR_TAGS)
    bad = "|".join(f"*{w}*" for w in OUT_OF_SERVICE)
    read = f"s=$(sinfo -h -N -n {n} -o '%T|%E' | head -n 1); st=$(printf %s \"${{s%%|*}}\" | tr A-Z a-z)"
    keep = f'case "${{s#*|}}" in {ours}) ;; *) echo "GFDRAIN {node} kept ${{s#*|}}"; exit 0;; esac'
    drain = f"e=$(scontrol update NodeName={n} State=DRAIN Reason={r} 2>&1)"
    return (
        f'({read}; case "$st" in {bad}) {keep};; esac; '
        f'if {drain}; then echo "GFDRAIN {node} drained"; else echo "GFDRAIN {node} error $e"; fi)'
    )


def resume_command(node: str) -> str:
    """Resume ``node`` only while its reason carries one of :data:`OUR_TAGS`: ``GFRESUME <node> resumed|kept|error``."""
    n = shlex.quote(node)
    ours = "|".join(f'"{tag}"*' for tag in OUR_TAGS)
    resume = f"e=$(scontrol update NodeName={n} State=RESUME 2>&1)"
    return (
        f"(s=$(sinfo -h -N -n {n} -o '%E' | head -n 1); case \"$s\" in {ours}) "
        f'if {resume}; then echo "GFRESUME {node} resumed"; else echo "GFRESUME {node} error $e"; fi;; '
        f'*) echo "GFRESUME {node} kept $s";; esac)'
    )


def parse_marks(text: str, mark: str) -> dict[str, tuple[str, str]]:
    """``<mark> <node> <word> <rest>`` lines -> node: (word, rest)."""
    out = {}
    for line in text.splitlines():
        parts = line.split(" ", 3)
        if parts[0] == mark and len(parts) >= 3:
            out[parts[1]] = (parts[2], parts[3] if len(parts) > 3 else "")
    return out


# --------------------------------------------------------------------------- partitions, reservations


def partitions_command(partitions: list[str]) -> str:
    return "; ".join(f'echo "GFPART {p} $(scontrol -o show partition {shlex.quote(p)} 2>&1 | head -n 1)"'
                     for p in partitions)  # fmt: skip


def parse_partitions(text: str) -> dict[str, list[str]]:
    """Per partition its nodes now (Slurm's runtime view, which a spare move changes)."""
    out: dict[str, list[str]] = {}
    for line in text.splitlines():
        if line.startswith("GFPART "):
            _, part, rest = ([*line.split(" ", 2), ""])[:3]
            m = re.search(r"(?:^|\s)Nodes=(\S+)", rest)
            if m and "PartitionName=" in rest:
                out[part] = [] if m[1] in ("(null)", "") else hostlist.expand(m[1])
    return out


def set_partition_command(partition: str, nodes: list[str]) -> str:
    """``scontrol update PartitionName=<p> Nodes=<hostlist>`` (the whole list, as scontrol(1) takes it)."""
    return f"scontrol update PartitionName={shlex.quote(partition)} Nodes={shlex.quote(hostlist.compress(nodes))}"


def reservation_commands(name: str, nodes: list[str], minutes: int) -> tuple[str, str]:
    """(create, delete) of a maintenance reservation for root on ``nodes`` (jobs of others kept off)."""
    create = (
        f"scontrol create reservation ReservationName={shlex.quote(name)} Users=root StartTime=now "
        f"Duration={int(minutes)} Nodes={shlex.quote(hostlist.compress(nodes))} Flags=MAINT,IGNORE_JOBS"
    )
    return create, f"scontrol delete ReservationName={shlex.quote(name)}"
