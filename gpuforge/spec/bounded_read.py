"""Reading an input file gpuforge is handed: only a regular file, and no more of it than its limit.

The type and size are checked on the opened file before a byte is read, so ``/dev/zero``, a FIFO
(opened without waiting for a writer), a directory or a huge file cost one ``fstat``.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from gpuforge.spec.limits import Limit


class InputFileError(Exception):
    """An input file that was not read: ``why`` says what it is or which limit it is over."""

    def __init__(self, why: str) -> None:
        self.why = why
        super().__init__(why)


def read_regular_file(path: str | Path, limit: Limit, *, follow_links: bool = True) -> bytes:
    """The bytes of the regular file ``path``, at most ``limit.value`` of them (else InputFileError).

    ``follow_links=False`` also refuses a symbolic link (``O_NOFOLLOW``).
    """
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | (0 if follow_links else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except OSError as e:
        raise InputFileError(f"cannot read it: {e.strerror or e}") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_size > limit.value:
        os.close(fd)
        if st.st_size > limit.value and stat.S_ISREG(st.st_mode):
            raise InputFileError(limit.refusal(st.st_size))
        kind = "a directory" if stat.S_ISDIR(st.st_mode) else "a device, FIFO or socket"
        raise InputFileError(f"refused: {kind}, not a regular file")
    with os.fdopen(fd, "rb") as f:
        try:
            data = f.read(limit.value + 1)
        except OSError as e:
            raise InputFileError(f"cannot read it: {e.strerror or e}") from None
    if len(data) > limit.value:  # it grew since fstat
        raise InputFileError(limit.refusal())
    return data
