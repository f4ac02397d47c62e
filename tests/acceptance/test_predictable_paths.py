"""Review item 10: nothing of a campaign sits at a predictable path in a world-writable folder.

The fio test file was ``/var/tmp/.gpuforge-accept-<job>.fio`` (job ids are sequential): a link
planted there made root's fio overwrite its target. It is now in a fresh ``mkdtemp`` folder the
runner makes and removes. The job's output, read back and trusted, is written to root's
``/var/lib/gpuforge`` instead of ``/var/tmp``.
"""

from __future__ import annotations

import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpuforge.acceptance import batch, slurm_actions
from tests.acceptance.test_campaign import fast
from tests.acceptance.test_node_runner import run_runner


def test_a_planted_link_at_the_old_fio_path_is_never_written(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    (tmp_path / ".gpuforge-accept-4711.fio").symlink_to(victim)  # the job id the runner is given
    probe = "for d in {scratch}; do stat -c %a $d; echo data > {scratch}/gpuforge-accept.fio; done"
    config: dict[str, Any] = {"campaign": "t", "gpus": {}, "steps": [
        {"name": "disk", "argv": ["sh", "-c", probe], "timeout": 10, "scratch_in": str(tmp_path)}]}  # fmt: skip
    cp = run_runner(config, tmp=tmp_path)
    report = batch.decode_output(cp.stdout, ["node7"], labelled=False).reports["node7"]
    [disk] = report["steps"]
    assert disk["status"] == "ran" and disk["rc"] == 0 and disk["stdout"].strip() == "700", disk
    assert victim.read_text() == "precious\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == [".gpuforge-accept-4711.fio", "victim"], "scratch removed"
    config["steps"][0]["scratch_in"] = str(tmp_path / "missing")
    [missing] = batch.decode_output(run_runner(config, tmp=tmp_path).stdout, ["node7"], labelled=False).reports[
        "node7"
    ]["steps"]
    assert missing["status"] == "missing" and "scratch folder" in missing["reason"]
    assert stat.S_ISLNK((tmp_path / ".gpuforge-accept-4711.fio").lstat().st_mode)


def test_the_job_output_is_in_roots_folder(spec_at: Callable) -> None:
    spec, _ = spec_at(fast())
    group = batch.JobGroup("batch", "batch", None, ("node1",), (("node1", 0),))
    script = batch.batch_script(spec, group, "c")
    assert "#SBATCH --output=/var/lib/gpuforge/gpuforge-accept-%j.out" in script
    assert "/var/tmp/gpuforge-accept" not in script
    assert slurm_actions.output_command("12") == (
        "cat /var/lib/gpuforge/gpuforge-accept-12.out && rm -f /var/lib/gpuforge/gpuforge-accept-12.out"
    )
    assert slurm_actions.JOB_OUTPUT_DIR == batch.OUTPUT_DIR
