"""Connecting a run's nodes, with the cause of each failure (as ``validate`` reports it, no slower).

pyinfra's own retries would try every failure three times, a second or two apart, a timeout
included; here only a connection the node's sshd took and then dropped (a busy sshd: closed,
reset, no banner) is tried again, as the validator's transport does. Every other cause (refused,
no route, timeout, a host key unknown or changed, a refused login) is final at once. The cause
is node-influenced text (the SSH banner, the server's messages): it is bounded to one line of
:data:`CAUSE_CHARS` with control characters written as ``\\xNN`` before anyone prints it.
"""

from __future__ import annotations

import contextlib
import random
from typing import Any

import gevent
from pyinfra.api import State
from pyinfra.api.exceptions import PyinfraError
from pyinfra.api.state import BaseStateCallback

from gpuforge.progress import control_safe

#: Tries after the first, for a connection the node dropped (the validator's transport tries once more).
CONNECT_RETRIES = 2
#: How much of the connector's message is kept (it may quote what the node sent).
CAUSE_CHARS = 200

#: (words in the connector's message, lower case; what it means; worth another try).
CAUSES: tuple[tuple[str, str, bool], ...] = (
    ("not found in known_hosts", "host key unknown: the node is not in the known_hosts file (ssh.known_hosts, "
     "else ~/.ssh/known_hosts); add its key", False),
    ("no host key for", "host key unknown: the node is not in the known_hosts file (ssh.known_hosts, "
     "else ~/.ssh/known_hosts); add its key", False),
    ("does not match", "host key changed: the node's key is not the one in known_hosts", False),
    ("authentication", "login refused (check ssh.user and ssh.key)", False),
    ("connection refused", "connection refused: nothing listens on the SSH port", False),
    ("no route to host", "no route to host", False),
    ("network is unreachable", "network is unreachable", False),
    ("timed out", "no answer in time (timeout)", False),
    ("could not resolve", "the host name does not resolve", False),
    ("protocol banner", "the node closed the connection before SSH began", True),
    ("reset by peer", "the node reset the connection", True),
    ("eof", "the node closed the connection", True),
)  # fmt: skip


def one_line(text: str) -> str:
    """Connector text as it may be shown: one line, at most :data:`CAUSE_CHARS`, control characters escaped."""
    line = " ".join(text[: CAUSE_CHARS * 4].split())
    cut = line[:CAUSE_CHARS] + ("..." if len(line) > CAUSE_CHARS else "")
    return control_safe(cut)


def _row(message: str) -> tuple[str, bool] | None:
    low = message.lower()
    return next(((what, again) for words, what, again in CAUSES if words in low), None)


def explain(message: str) -> str:
    """``unreachable over SSH: <cause> (<the connector's words>)``, the words sanitized."""
    row = _row(message)
    said = one_line(message) or "no message"
    return f"unreachable over SSH: {row[0]} ({said})" if row else f"unreachable over SSH: {said}"


def worth_retrying(message: str) -> bool:
    """True only when the node's sshd took the connection and then dropped it."""
    row = _row(message)
    return row is not None and row[1]


class ConnectErrors(BaseStateCallback):
    """The connector's message for each host that failed to connect (its last try)."""

    def __init__(self) -> None:
        self.why: dict[str, str] = {}

    def host_connect_error(self, state: Any, host: Any, error: Any) -> None:  # type: ignore[override]
        del state
        said = str(error.args[0]) if getattr(error, "args", None) else str(error)
        below = _underlying(error.__context__)
        self.why[host.name] = f"{said}: {below}" if below and below not in said else said


def _underlying(exc: BaseException | None) -> str:
    """The socket's own words under the connector's message: paramiko's ``NoValidConnectionsError``
    says "Unable to connect to port 22" and keeps each address's error (refused, no route) apart."""
    per_address = getattr(exc, "errors", None)
    if isinstance(per_address, dict) and per_address:
        return "; ".join(str(getattr(e, "strerror", None) or e) for e in per_address.values())
    return str(exc.strerror) if isinstance(exc, OSError) and exc.strerror else ""


def _try(state: State, hosts: list[Any]) -> None:
    greenlets = [state.pool.spawn(h.connect) for h in hosts]
    gevent.joinall(greenlets)


def connect_nodes(state: State) -> dict[str, str]:
    """Connect every host of ``state`` (as ``pyinfra.api.connect.connect_all`` does: the connected
    are activated, the rest failed); return each unreachable host's ``explain`` line."""
    errors = ConnectErrors()
    state.add_callback_handler(errors)
    hosts = [h for h in state.inventory if state.is_host_in_limit(h)]
    pending = hosts
    for attempt in range(1 + CONNECT_RETRIES):
        if attempt:
            gevent.sleep(random.uniform(1.0, 2.0))
        _try(state, pending)
        pending = [h for h in pending if not h.connected and worth_retrying(errors.why.get(h.name, ""))]
        if not pending:
            break
    for h in hosts:
        if h.connected:
            state.activate_host(h)
    failed = {h for h in hosts if not h.connected}
    with contextlib.suppress(PyinfraError):  # raised when no host could be reached; the caller reports each
        state.fail_hosts(failed, activated_count=len(hosts))
    return {h.name: explain(errors.why.get(h.name, "")) for h in failed}
