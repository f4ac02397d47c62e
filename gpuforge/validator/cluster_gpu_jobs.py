"""A job that asks for one GPU (or one MIG slice) sees exactly that one: ``job.gpu_binding``.

From the controller, one job step per GPU node: ``srun --gres=gpu:<type>:1`` running
``nvidia-smi -L`` and printing ``CUDA_VISIBLE_DEVICES``. With the GPUs bound (gres.conf's
``File=`` lines or ``AutoDetect=nvml``) and confined (cgroup.conf ``ConstrainDevices=yes``),
the step lists one GPU, or one GPU with one MIG device under it, and Slurm sets
``CUDA_VISIBLE_DEVICES`` to one entry. A step that lists all GPUs of the node is the fault this
check is for: a job would share every GPU of its node.
"""

from __future__ import annotations

from gpuforge.probes.mig import parse_nvidia_smi_list
from gpuforge.spec import Spec
from gpuforge.spec.gpus import GPU_MODELS
from gpuforge.spec.nodes import Node
from gpuforge.validator.cluster import (
    ClusterData,
    cluster_check,
    gate_slurm_compute,
    parse_srun_output,
)
from gpuforge.validator.node.base import BLOCKED, FAIL, PASS, WARNING, Outcome

GPU_JOB_TIMEOUT_S = 30
CVD_MARK = "__cvd="


def gpu_request(spec: Spec, node: Node) -> str | None:
    """The GRES of one GPU of the node, whole if it has whole GPUs, else one MIG slice (None: no GPU)."""
    from gpuforge.render.slurm import node_gres

    group = next(g for g in spec.node_groups if g.name == node.group)
    gres = [g for g in node_gres(spec, group) if g.startswith("gpu:")]
    if not gres:
        return None
    whole = GPU_MODELS[group.hardware.gpu.model].gres_type if group.hardware.gpu else ""
    pick = next((g for g in gres if g.split(":")[1] == whole), gres[0])
    return f"{pick.rsplit(':', 1)[0]}:1"


def gate_gpu_node(spec: Spec, node: Node) -> str | None:
    reason = gate_slurm_compute(spec, node)
    if reason:
        return reason
    return None if node.hardware.gpu else "no GPUs in this node"


def gpu_job_command(targets: list[tuple[str, str | None, str]]) -> str:
    """One script: per (node, partition, gres) a one-GPU job step, all at once; per node
    ``__node=``, what the step printed (``__cvd=<CUDA_VISIBLE_DEVICES>`` and ``nvidia-smi -L``),
    and ``__rc=``."""
    lines = ["d=$(mktemp -d) || exit 1", "trap 'rm -rf \"$d\"' EXIT"]
    job = f'echo "{CVD_MARK}${{CUDA_VISIBLE_DEVICES-unset}}"; nvidia-smi -L'
    for name, partition, gres in targets:
        p = f" -p {partition}" if partition else ""
        lines.append(
            f"(timeout {GPU_JOB_TIMEOUT_S} srun -N1 -n1 -w {name}{p} -t 1 --gres={gres} -J gpuforge-validate "
            f'sh -c \'{job}\' >"$d/{name}" 2>&1; echo "__rc=$?" >>"$d/{name}") &'
        )
    lines.append("wait")
    lines += [f'echo "__node={name}"; cat "$d/{name}"' for name, _, _ in targets]
    return "\n".join(lines)


def parse_gpu_jobs(text: str) -> dict[str, tuple[int | None, str]]:
    """Per node: (exit status, output) of :func:`gpu_job_command`."""
    return parse_srun_output(text)


def judge_gpu_job(gres: str, rc: int | None, out: str) -> Outcome:
    """Exactly one GPU (a whole GPU, or one MIG device) and one CUDA_VISIBLE_DEVICES entry."""
    lines = out.splitlines()
    if rc == 124:
        return FAIL, f"srun --gres={gres} did not finish within {GPU_JOB_TIMEOUT_S} s"
    if rc != 0:
        tail = " | ".join(x.strip() for x in lines[-2:] if x.strip())
        return FAIL, f"srun --gres={gres} nvidia-smi -L failed (exit {rc}): {tail or 'no output'}"
    cvd = next((x[len(CVD_MARK) :].strip() for x in lines if x.startswith(CVD_MARK)), "unset")
    listing = parse_nvidia_smi_list([x for x in lines if not x.startswith(CVD_MARK)])
    gpus = listing["gpus"]
    migs = [m["uuid"] for g in gpus for m in g["mig_devices"]]
    is_mig = gres.split(":")[1] not in {m.gres_type for m in GPU_MODELS.values()}
    seen = f"{len(gpus)} GPU(s), {len(migs)} MIG device(s), CUDA_VISIBLE_DEVICES={cvd}"
    entries = [e for e in cvd.split(",") if e] if cvd != "unset" else []
    if len(entries) != 1:
        return FAIL, f"a job asking for {gres} got CUDA_VISIBLE_DEVICES={cvd} ({seen}): Slurm did not bind one GPU"
    if len(gpus) != 1 or (is_mig and len(migs) != 1) or (not is_mig and migs):
        return FAIL, f"a job asking for {gres} sees {seen}: the GPUs are not confined to the job (ConstrainDevices)"
    return PASS, f"a job asking for {gres} sees exactly one: {migs[0] if is_mig else gpus[0]['uuid']} ({seen})"


@cluster_check(
    "job.gpu_binding",
    "job",
    WARNING,
    "A job asking for one GPU (or MIG slice) sees exactly that one: srun --gres=gpu:<type>:1 nvidia-smi -L",
    depends_on=("job.srun",),
    gate=gate_gpu_node,
)
def gpu_binding(data: ClusterData, node: Node) -> Outcome:
    gres = gpu_request(data.spec, node) or "gpu:1"
    if node.name not in data.gpu_jobs:
        return BLOCKED, f"the GPU job did not run ({data.slurm_error or 'controller not reached'})"
    rc, out = data.gpu_jobs[node.name]
    return judge_gpu_job(gres, rc, out)
