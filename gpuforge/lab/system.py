"""Small host helpers: running commands, finding processes and mounts, checking prerequisites."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass


class LabError(RuntimeError):
    """Something the lab could not do; the message says what and where to look."""


# Tool -> Debian package that provides it.
REQUIRED_TOOLS: dict[str, str] = {
    "systemd-nspawn": "systemd-container",
    "ip": "iproute2",
    "ssh": "openssh-client",
    "ssh-keygen": "openssh-client",
    "apt-cacher-ng": "apt-cacher-ng",
    "setsid": "util-linux",
}
BUILD_TOOLS: dict[str, str] = {"mmdebstrap": "mmdebstrap"}


def require_root() -> None:
    """Raise unless running as root (namespaces, bridges and containers need it)."""
    if os.geteuid() != 0:
        raise LabError("the lab needs root (network namespaces, bridges, systemd-nspawn): run it as root")


def missing_tools(tools: dict[str, str]) -> dict[str, str]:
    """Tools (with their Debian package) that are not on PATH (nor in /usr/sbin)."""
    path = os.environ.get("PATH", "") + ":/usr/sbin:/sbin"
    return {t: pkg for t, pkg in tools.items() if shutil.which(t, path=path) is None}


def require_tools(tools: dict[str, str]) -> None:
    """Raise with the packages to install if any tool is missing."""
    missing = missing_tools(tools)
    if missing:
        pkgs = " ".join(sorted(set(missing.values())))
        raise LabError(f"missing {', '.join(sorted(missing))}: install with `apt-get install {pkgs}`")


def run(
    cmd: Sequence[str], check: bool = True, timeout: float = 120, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    """Run a command (``stdin``: its input), capturing output; raise :class:`LabError` with its stderr on failure."""
    feed: dict[str, object] = {"input": stdin} if stdin is not None else {"stdin": subprocess.DEVNULL}
    try:
        cp = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout, **feed)  # type: ignore[call-overload]
    except subprocess.TimeoutExpired as exc:
        raise LabError(f"`{' '.join(cmd)}` did not finish within {timeout} s") from exc
    if check and cp.returncode != 0:
        raise LabError(f"`{' '.join(cmd)}` failed ({cp.returncode}): {(cp.stderr or cp.stdout).strip()}")
    return cp


@dataclass(frozen=True)
class Proc:
    """A live process: pid and argv."""

    pid: int
    argv: tuple[str, ...]


def processes(match: Callable[[tuple[str, ...]], bool]) -> list[Proc]:
    """Live (not zombie) processes whose argv satisfies ``match``."""
    out: list[Proc] = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                raw = f.read()
        except OSError:
            continue
        argv = tuple(a.decode(errors="replace") for a in raw.split(b"\0") if a)
        if argv and match(argv) and alive(pid):
            out.append(Proc(pid, argv))
    return out


def environ(pid: int) -> dict[str, str]:
    """The initial environment of ``pid`` (empty if unreadable)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            raw = f.read()
    except OSError:
        return {}
    out: dict[str, str] = {}
    for item in raw.split(b"\0"):
        k, sep, v = item.decode(errors="replace").partition("=")
        if sep:
            out[k] = v
    return out


def alive(pid: int) -> bool:
    """True if ``pid`` exists and is not a zombie (reaps it if it is our child)."""
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def children(pid: int) -> list[int]:
    """All descendants of ``pid`` (via /proc/<pid>/task/*/children)."""
    out: list[int] = []
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for t in tasks:
            try:
                with open(f"/proc/{p}/task/{t}/children") as f:
                    kids = [int(x) for x in f.read().split()]
            except OSError:
                continue
            out += kids
            todo += kids
    return out


def rss_kib(pids: Sequence[int]) -> int:
    """Sum of VmRSS (KiB) of ``pids``."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
        except OSError:
            pass
    return total


def stop_processes(pids: Sequence[int], timeout: float = 20, sig: int = signal.SIGTERM) -> None:
    """Send ``sig`` to ``pids``, wait up to ``timeout`` s, then SIGKILL the rest."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
    deadline = time.monotonic() + timeout
    left = list(pids)
    while left and time.monotonic() < deadline:
        left = [p for p in left if alive(p)]
        if left:
            time.sleep(0.1)
    for pid in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while any(alive(p) for p in left) and time.monotonic() < deadline:
        time.sleep(0.05)


def spawn_detached(cmd: Sequence[str], log_path: str, cwd: str = "/") -> None:
    """Start ``cmd`` in its own session (``setsid --fork``), stdout/stderr appended to ``log_path``."""
    with open(log_path, "ab") as log:
        subprocess.run(
            ["setsid", "--fork", *cmd],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            check=True,
            close_fds=True,
        )


def mounts_under(path: str) -> list[str]:
    """Mount points at or below ``path``, deepest first."""
    path = os.path.realpath(path)
    out = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            mp = line.split()[4].encode().decode("unicode_escape")
            if mp == path or mp.startswith(path.rstrip("/") + "/"):
                out.append(mp)
    return sorted(set(out), key=lambda m: m.count("/"), reverse=True)


def unmount_all(path: str) -> None:
    """Unmount everything at or below ``path`` (lazily if busy)."""
    for mp in mounts_under(path):
        if run(["umount", mp], check=False).returncode != 0:
            run(["umount", "-l", mp], check=False)


def remove_tree(path: str) -> None:
    """Unmount anything below ``path``, then delete it; never crosses into a mount."""
    if not os.path.lexists(path):
        return
    unmount_all(path)
    if mounts_under(path):
        raise LabError(f"cannot delete {path}: still mounted: {', '.join(mounts_under(path))}")
    shutil.rmtree(path)


def write_file(path: str, text: str, mode: int = 0o644) -> bool:
    """Atomically write ``text`` to ``path`` if it differs; return True if it changed."""
    try:
        with open(path, encoding="utf-8") as f:
            if f.read() == text and (os.stat(path).st_mode & 0o7777) == mode:
                return False
    except OSError:
        pass
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if os.path.islink(path):
        os.unlink(path)
    tmp = f"{path}.gftmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.chmod(tmp, mode)
    os.replace(tmp, path)
    return True


@contextlib.contextmanager
def file_lock(path: str) -> Iterator[None]:
    """Exclusive ``flock`` on ``path`` for the duration of the block."""
    import fcntl

    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
