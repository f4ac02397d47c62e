"""apt command lines for Debian and Ubuntu nodes: bounded network waits, unbounded dpkg, self-repair.

Invariants:
- A time bound ends only a network wait. ``apt-get update`` runs under ``timeout`` and a watchdog
  that ends it after a minute without download progress, with apt's binary caches switched off
  (``Dir::Cache::pkgcache=``): apt moves verified index files into place by rename once a whole
  Release transaction checks out, so ending it leaves the old or the new lists, never a
  half-written file. Nothing that runs dpkg is ever under a time bound.
- A partial update is an error (``--error-on=any``): an install never runs on lists that are
  missing an index, so "Unable to locate package" cannot follow a mirror's failure.
- Every install first repairs what an interrupted run left: lists apt cannot parse are dropped
  (they are a cache) and fetched anew; a non-empty dpkg journal or packages that ``dpkg --audit``
  lists are configured (``dpkg --configure -a``, then ``apt-get -f install``). Each repair says so
  on stderr with a ``gpuforge:`` prefix.
- dpkg's lock is waited for (``DPkg::Lock::Timeout``), so a concurrent apt on the node (e.g.
  unattended-upgrades at boot) delays a run instead of failing it. Before the repair, a dpkg, apt
  or apt-get process still running on the node (one an interrupted run left: its SSH session
  ended, the package run goes on) is waited for too, up to ``PACKAGE_RUN_WAIT_S``: ``dpkg
  --configure -a`` has no lock timeout of its own and would fail on its lock.
"""

from __future__ import annotations

import shlex

APT_ENV = "DEBIAN_FRONTEND=noninteractive"
#: Per-request bounds: a stalled mirror fails a request instead of hanging it.
APT_NET = "-o Acquire::Retries=3 -o Acquire::http::Timeout=30 -o Acquire::https::Timeout=30"
LOCK_WAIT = "-o DPkg::Lock::Timeout=600"
DPKG_CONF = "-o Dpkg::Options::=--force-confold -o Dpkg::Options::=--force-confdef"
APT_INSTALL = f"{APT_ENV} apt-get -q -y {APT_NET} {LOCK_WAIT} {DPKG_CONF} install --no-install-recommends"

#: Seconds ``apt-get update`` may go without download progress before it is ended. apt's own
#: timeouts do not end every stall: through apt-cacher-ng with 24 nodes updating at once, apt-get
#: update was seen waiting for ever on a method that had given up, with no connection open.
UPDATE_STALL_S = 60
#: Seconds one ``apt-get update`` may take in all, progress or not (then KILLed 30 s later).
UPDATE_BOUND_S = 900
#: The shell function that runs one watched update (defined where it is used).
UPDATE_FUNCTION = "gf_apt_update"
_UPDATE_ONCE = (
    f"timeout -k 30 {UPDATE_BOUND_S} apt-get -q {APT_NET} {LOCK_WAIT} "
    "-o Dir::Cache::pkgcache= -o Dir::Cache::srcpkgcache= -o APT::Status-Fd=3 --error-on=any update"
)
#: apt reports download progress (``dlstatus:<file>:<percent>:...``) on fd 3 about twice a second;
#: the watchdog ends the update when that line has not changed for UPDATE_STALL_S seconds while
#: files are still being fetched (at 100% apt only parses the lists: CPU, not network).
_UPDATE_WATCHED = (
    f"{UPDATE_FUNCTION}() {{ "
    "s=$(mktemp) || return 1; "
    f'{_UPDATE_ONCE} 3>"$s" & p=$!; '
    "last=; idle=0; "
    'while kill -0 "$p" 2>/dev/null; do sleep 1; cur=$(tail -n 1 "$s"); '
    'if [ "$cur" != "$last" ]; then last=$cur; idle=0; '
    'else case "$cur" in *:100.0000:*) ;; *) idle=$((idle + 1)) ;; esac; fi; '
    f'if [ "$idle" -ge {UPDATE_STALL_S} ]; then '
    f"echo 'gpuforge: apt-get update made no progress for {UPDATE_STALL_S} s: ended it' >&2; "
    'kill "$p" 2>/dev/null; idle=0; fi; '
    'done; wait "$p"; rc=$?; rm -f "$s"; return "$rc"; }'
)
#: ``gf_backoff BASE SPREAD``: sleep BASE plus a random share of SPREAD seconds (a byte of
#: /dev/urandom), so nodes that failed together do not retry in the same second: at 24 nodes
#: through one apt-cacher-ng, fixed pauses sent the same two nodes back into the same collision.
_BACKOFF = "gf_backoff() { sleep $(( $1 + $(od -An -N1 -tu1 /dev/urandom) % $2 )); }"
#: Three tries with backoff: a mirror that keeps a stalled connection alive defeats apt's own timeout.
APT_UPDATE = (
    f"{{ {_UPDATE_WATCHED}; {_BACKOFF}; {UPDATE_FUNCTION} || {{ gf_backoff 5 10; {UPDATE_FUNCTION}; }} "
    f"|| {{ gf_backoff 15 30; {UPDATE_FUNCTION}; }}; }}"
)

#: True (exit 0) when an earlier dpkg run was interrupted: entries in dpkg's journal, or a package in
#: one of dpkg's in-between states (half-installed H, unpacked U, half-configured F, triggers-awaited W,
#: triggers-pending t). Not ``dpkg --audit``: it also lists healthy packages that ship no md5sums.
DPKG_INTERRUPTED = (
    '[ -n "$(ls -A /var/lib/dpkg/updates 2>/dev/null)" ] || '
    "dpkg-query -W -f='${db:Status-Abbrev}\\n' 2>/dev/null | cut -c2 | grep -q '[HUFWt]'"
)
#: Seconds the repair waits for a package run already going on the node (then it fails, naming it).
PACKAGE_RUN_WAIT_S = 3600
#: Prints the first dpkg/apt/apt-get process on the node (``name (pid N)``), exit 1 when none runs.
#: ``/proc/<pid>/stat`` is ``pid (comm) state ...``: a zombie (``Z``) has ended and holds no lock.
_PACKAGE_RUN = (
    "gf_package_run() { for f in /proc/[0-9]*/stat; do "
    '{ read -r s < "$f"; } 2>/dev/null || continue; '
    'case "$s" in *" (dpkg) "[!Z]*|*" (apt) "[!Z]*|*" (apt-get) "[!Z]*) '
    'c=${s#* (}; echo "${c%%)*} (pid ${s%% *})"; return 0 ;; esac; '
    "done; return 1; }"
)
WAIT_FOR_PACKAGE_RUN = (
    f"{_PACKAGE_RUN}; w=0; while b=$(gf_package_run); do "
    '[ "$w" -eq 0 ] && echo "gpuforge: waiting for $b, a package run already going on, to finish" >&2; '
    f'[ "$w" -ge {PACKAGE_RUN_WAIT_S} ] && '
    f'{{ echo "gpuforge: $b still runs after {PACKAGE_RUN_WAIT_S} s: not repairing under it" >&2; exit 1; }}; '
    "w=$((w + 1)); sleep 1; done"
)
REPAIR_DPKG = (
    f"{WAIT_FOR_PACKAGE_RUN}; "
    f"if {DPKG_INTERRUPTED}; then "
    "echo 'gpuforge: an earlier package run was interrupted: dpkg --configure -a' >&2; "
    f"{APT_ENV} dpkg --force-confold --force-confdef --configure -a && "
    f"{APT_ENV} apt-get -q -y {APT_NET} {LOCK_WAIT} {DPKG_CONF} --no-install-recommends -f install; "
    "else true; fi"
)
#: apt's lists and binary caches are a cache: when apt cannot parse them, drop them and fetch them anew.
REPAIR_LISTS = (
    "if ! apt-cache policy >/dev/null 2>&1; then "
    "echo 'gpuforge: apt could not parse its package lists: fetching them anew' >&2; "
    "find /var/lib/apt/lists -maxdepth 2 -type f ! -name lock -delete; rm -f /var/cache/apt/*.bin; "
    f"{APT_UPDATE}; "
    "fi"
)
#: Lists first (``apt-get -f install`` reads them), then dpkg.
REPAIR = f"{{ {REPAIR_LISTS}; }} && {REPAIR_DPKG}"


def install_command(packages: list[str], *, downgrades: bool = False, update_first: bool = False) -> str:
    """Repair, then install ``packages`` (``name`` or ``name=version``) in one apt transaction.

    Without ``update_first`` the lists at hand are tried first and refreshed only when that fails
    (a fresh node, stale lists); with it (sources just changed) they are refreshed before.
    """
    pkgs = " ".join(shlex.quote(p) for p in packages)
    inst = f"{APT_INSTALL}{' --allow-downgrades' if downgrades else ''} {pkgs}"
    if update_first:
        return f"{REPAIR} && {APT_UPDATE} && {inst}"
    return f"{REPAIR} && {{ {inst} || {{ {APT_UPDATE} && {inst}; }}; }}"
