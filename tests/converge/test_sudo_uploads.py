"""With a non-root SSH user and sudo, uploads go through the user's private directory under
/var/lib/gpuforge (0700), never through /tmp (pyinfra's default, where a munge key would be
readable by local users until sudo copies it)."""

from __future__ import annotations

import stat
import subprocess
from pathlib import Path

from pyinfra.api import FileUploadCommand, StringCommand

from gpuforge.deploy.converge import STAGING_DIR, UPLOAD_DIR, Step, sudo_upload_dir_command, sudo_upload_temp
from gpuforge.deploy.operations.layer import step_commands
from gpuforge.render.files import RenderedFile

KEY = RenderedFile("/etc/munge/munge.key", b"k" * 1024, mode="0400", owner="munge", group="munge", secret=True)


def test_uploads_through_the_users_private_directory() -> None:
    cmds = list(step_commands([Step("upload", "write key", upload=KEY)], via_user="gfadmin"))
    uploads = [c for c in cmds if isinstance(c, FileUploadCommand)]
    assert len(uploads) == 1
    assert uploads[0].remote_temp_filename == sudo_upload_temp(uploads[0].dest)
    assert uploads[0].remote_temp_filename.startswith(f"{UPLOAD_DIR}/")
    assert uploads[0].dest.startswith(f"{STAGING_DIR}/")
    setup = [str(c) for c in cmds[: cmds.index(uploads[0])] if isinstance(c, StringCommand)]
    assert sudo_upload_dir_command("gfadmin") in setup


def test_root_uploads_go_straight_to_the_root_only_staging_dir() -> None:
    (upload,) = [c for c in step_commands([Step("upload", "w", upload=KEY)]) if isinstance(c, FileUploadCommand)]
    assert upload.remote_temp_filename is None and upload.dest.startswith(f"{STAGING_DIR}/")


def test_the_upload_directory_command_makes_a_private_directory(tmp_path: Path) -> None:
    """Run for real (paths moved under tmp_path): 0700, owned by the user, also when it existed 0777."""
    root = tmp_path / "var-lib-gpuforge"
    cmd = sudo_upload_dir_command("root").replace("/var/lib/gpuforge", str(root))
    (root / "upload").mkdir(parents=True)
    (root / "upload").chmod(0o777)
    subprocess.run(["sh", "-c", cmd], check=True)
    mode = (root / "upload").stat().st_mode
    assert stat.S_IMODE(mode) == 0o700
