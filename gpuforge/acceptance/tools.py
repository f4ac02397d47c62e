"""The programs an acceptance campaign runs, their exact command lines, and where each flag is documented.

Every flag and output format used by :mod:`.batch` (the job) and :mod:`.parsers` (the judges) is
in :data:`SOURCES`; nothing about stress-ng, fio, dcgmi, nccl-tests, pyxis or the Slurm tools is
spelled elsewhere. The builders return argv lists (the node runner executes them without a shell)
or shell words already quoted for the batch script.
"""

from __future__ import annotations

import shlex

from gpuforge.spec import hostlist
from gpuforge.spec.acceptance import ContainerStep, CpuStep, DcgmStep, DiskStep, MemoryStep, NcclStep
from gpuforge.spec.citation import Citation

HEALTH_PROGRAM = "/usr/local/sbin/gpuforge-health"

SOURCES: dict[str, Citation] = {
    "stress-ng": Citation(
        "stress-ng(1), Debian 12 package stress-ng 0.15.06-2 (/usr/share/man/man1/stress-ng.1.gz); "
        "github.com/ColinIanKing/stress-ng",
        "https://github.com/ColinIanKing/stress-ng",
        "'-c N, --cpu N start N workers exercising the CPU'; '-m N, --vm N'; '--vm-bytes N ... as % of total "
        "available memory'; '-t N, --timeout T'; '--metrics-brief show shorter list of stressor metrics'; "
        "'specifying a zero value will select the number of processors'; EXIT STATUS 0 success, 1 error, "
        "2 one or more stressors failed, 3 failed to initialise (lack of resources), 4 not implemented, "
        "5 killed by a signal, 6 exited unexpectedly, 7 bogo ops metrics untrustworthy. Metrics are printed on "
        "stderr: 'stressor bogo ops real time usr time sys time bogo ops/s bogo ops/s' then '(secs) (secs) (secs) "
        "(real time) (usr+sys time)' and one row per stressor (prefix 'metrc:' in 0.15, 'info:' in older "
        "releases: Red Hat RHEL for Real Time 8 guide, 'Measuring test outcomes with bogo operations')",
    ),
    "fio": Citation(
        "fio(1) (axboe/fio fio.1, man.archlinux.org/man/fio.1.en); output recorded from Debian 12 fio 3.33-3",
        "https://man.archlinux.org/man/fio.1.en",
        "'--output-format=format Set the reporting format to normal, terse, json, or json+'; JSON: 'jobs' "
        "[{'jobname', 'error', 'read'|'write': {'io_bytes', 'bw' (KiB/s), 'bw_bytes', 'iops', 'runtime' (ms), "
        "'lat_ns': {'min','max','mean','stddev'}}}]; exit status 1 and no JSON when an option is bad",
    ),
    "dcgmi-diag": Citation(
        "DCGM diagnostics (docs.nvidia.com/datacenter/dcgm/latest/user-guide/dcgm-diagnostics.html); "
        "NVIDIA/DCGM dcgmi/Diag.cpp and testing/python3/dcgm_diag_schema.json (tests/facts/upstream)",
        "https://docs.nvidia.com/datacenter/dcgm/latest/user-guide/dcgm-diagnostics.html",
        "'dcgmi diag -r 1|2|3|4' (seconds / about 2 minutes / about 15 minutes / longer; level 3 adds the "
        "targeted stress, targeted power and memory bandwidth tests); '-j' prints JSON: DCGM 4 root "
        "'DCGM Diagnostic' with test_categories[].tests[].results[] per entity and test_summary.status; parsed by "
        "gpuforge.probes.dcgm.parse_dcgmi_diag",
    ),
    "nccl-tests": Citation(
        "NVIDIA/nccl-tests README.md (Arguments) and src/common.cu",
        "https://github.com/NVIDIA/nccl-tests",
        "'-b,--minbytes', '-e,--maxbytes', '-f,--stepfactor', '-g,--ngpus <GPUs per thread>'; 'NCCL tests rely on "
        "MPI to work on multiple processes, hence multiple nodes'; rows 'size count type redop root time algbw "
        "busbw #wrong time algbw busbw #wrong' (out-of-place then in-place, GB/s); "
        'PRINT("# Out of bounds values : %d %s") and PRINT("# Avg bus bandwidth    : %g %s")',
    ),
    "pyxis": Citation(
        "NVIDIA/pyxis pyxis_slurm.c spank_opts (srun --help)",
        "https://github.com/NVIDIA/pyxis",
        "'--container-image=[USER@][REGISTRY#]IMAGE[:TAG]|PATH the image to use for the container filesystem. Can be "
        "either a docker image given as an enroot URI, or a path to a squashfs file'; unnamed containers are "
        "removed after the task",
    ),
    "sbatch": Citation(
        "sbatch(1), slurm.schedmd.com/sbatch.html (SchedMD/slurm doc/man/man1/sbatch.1)",
        "https://slurm.schedmd.com/sbatch.html",
        "'--parsable Outputs only the job id number and the cluster name if present. The values are separated by "
        "a semicolon'; -N, --ntasks-per-node, -w/--nodelist, -p, -t, -J, -o (%j: job id), --exclusive, "
        "--no-requeue, --chdir, --reservation",
    ),
    "srun": Citation(
        "srun(1), slurm.schedmd.com/srun.html",
        "https://slurm.schedmd.com/srun.html",
        "inside an allocation a step uses its nodes: -N, --ntasks-per-node, --kill-on-bad-exit=0 (a failing task "
        "does not end the others), --mpi=<plugin> (pmix, pmi2); '-l, --label Prepend task number to lines of "
        "stdout/err'; -m arbitrary: 'The arbitrary method of distribution will allocate processes in-order as listed "
        "in file designated by the environment variable SLURM_HOSTFILE ... If specifying a task count (-n, "
        "--ntasks=<number>), your tasks will be laid out on the nodes in the order of the file'",
    ),
    "scontrol": Citation(
        "scontrol(1), slurm.schedmd.com/scontrol.html (SchedMD/slurm doc/man/man1/scontrol.1)",
        "https://slurm.schedmd.com/scontrol.html",
        "'show job' prints JobState=, ExitCode=, Reason=, BatchHost= (job records kept MinJobAge, 300 s by "
        "default); 'update PartitionName=<p> Nodes=<name>': 'Identify the node(s) to be associated with this "
        "partition ... node range expressions'; 'update NodeName= State=DRAIN Reason=' / 'State=RESUME'",
    ),
    "sinfo": Citation(
        "sinfo(1), slurm.schedmd.com/sinfo.html",
        "https://slurm.schedmd.com/sinfo.html",
        "-h -N -n <nodes> -o with %N (node), %T (state, long form: idle, drained, draining, down, ...), %E (reason), "
        "%P (partition)",
    ),
    "k8s-job": Citation(
        "Kubernetes Jobs (kubernetes.io/docs/concepts/workloads/controllers/job/); Pod spec nodeName",
        "https://kubernetes.io/docs/concepts/workloads/controllers/job/",
        "batch/v1 Job: spec.backoffLimit, spec.template.spec.restartPolicy Never, activeDeadlineSeconds; "
        "spec.nodeName binds the pod to one node without the scheduler",
    ),
}


def stress_cpu(step: CpuStep) -> list[str]:
    """``stress-ng --cpu N --timeout Ss --metrics-brief`` (0 workers: one per processor)."""
    return ["stress-ng", "--cpu", str(step.workers), "--timeout", f"{step.seconds}s", "--metrics-brief"]


def stress_memory(step: MemoryStep) -> list[str]:
    """``stress-ng --vm N --vm-bytes P% --timeout Ss --metrics-brief``."""
    return ["stress-ng", "--vm", str(step.workers), "--vm-bytes", f"{step.percent}%", "--timeout", f"{step.seconds}s",
            "--metrics-brief"]  # fmt: skip


def fio_file(step: DiskStep) -> str:
    """The test file, in the runner's fresh scratch folder under ``step.directory`` (``{scratch}``,
    made by ``mkdtemp`` on the node and removed after the run): never a predictable path in a
    world-writable folder, where a planted link would have root's fio overwrite its target."""
    return "{scratch}/gpuforge-accept.fio"


def fio(step: DiskStep) -> list[str]:
    """One fio job on :func:`fio_file`, time based, JSON on stdout."""
    return [
        "fio", "--name=gpuforge-accept", f"--filename={fio_file(step)}", f"--size={step.size}",
        f"--rw={step.pattern.value}", f"--bs={step.block_size}", f"--iodepth={step.iodepth}", "--ioengine=libaio",
        f"--direct={int(step.direct)}", f"--runtime={step.seconds}", "--time_based", "--output-format=json",
    ]  # fmt: skip


def dcgm_diag(step: DcgmStep) -> list[str]:
    """``dcgmi diag -r LEVEL -j``."""
    return ["dcgmi", "diag", "-r", str(step.level), "-j"]


def nccl_node(step: NcclStep) -> list[str]:
    """all_reduce_perf over every GPU of the node (``{gpus}`` filled in on the node)."""
    return [step.command, "-b", step.min_bytes, "-e", step.max_bytes, "-f", "2", "-g", "{gpus}"]


def health() -> list[str]:
    """The node's installed health program, judging only (no drain: the campaign decides)."""
    return [HEALTH_PROGRAM, "--json", "--no-slurm"]


def container_srun(step: ContainerStep, nodes: int) -> str:
    """One pyxis step over every node: prints ``GFCONTAINER <node>`` from inside the image."""
    inner = 'echo "GFCONTAINER ${SLURMD_NODENAME:-$(hostname)}"'
    return (
        f"srun -N{nodes} --ntasks-per-node=1 --kill-on-bad-exit=0 --container-image={shlex.quote(step.image)} "
        f"sh -c {shlex.quote(inner)}"
    )


def nccl_leaf_srun(step: NcclStep, nodes: list[str], gpus_per_node: int) -> str:
    """all_reduce_perf across ``nodes`` (one leaf's): one rank per GPU (``-g 1``), MPI through srun."""
    return (
        f"srun -N{len(nodes)} -w {shlex.quote(hostlist.compress(nodes))} --ntasks-per-node={gpus_per_node} "
        f"--mpi={shlex.quote(step.mpi)} "
        f"{shlex.quote(step.command)} -b {step.min_bytes} -e {step.max_bytes} -f 2 -g 1"
    )
