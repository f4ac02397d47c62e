"""``with_defaults``: hosts given pyinfra's operation arguments up front resolve every argument to the
value pyinfra would have taken without them (the change is speed only)."""

from __future__ import annotations

from typing import Any

from pyinfra.api import Config, Inventory, State
from pyinfra.api.arguments import pop_global_arguments

from gpuforge.deploy.run import with_defaults


def _resolved(data: dict[str, Any], kwargs: dict[str, Any], config: Config) -> dict[str, Any]:
    state = State(Inventory(([("node1", data)], {}), role_controller=([("node1", data)], {})), config)
    host = state.inventory.get_host("node1")
    arguments, _ = pop_global_arguments(state, host, dict(kwargs))
    return dict(arguments)


def test_every_argument_resolves_as_before_with_the_hosts_own_and_the_calls_winning() -> None:
    config = Config(CONNECT_TIMEOUT=10, FAIL_PERCENT=100, PARALLEL=2, SUDO_USER="admin", SHELL="bash")
    own = {"ssh_user": "vagrant", "_sudo": True}
    calls: list[dict[str, Any]] = [{}, {"_sudo": False, "_timeout": 30}, {"_env": {"A": "1"}, "_chdir": "/tmp"}]
    for kwargs in calls:
        plain = _resolved(dict(own), kwargs, config)
        data = dict(own)
        with_defaults([("node1", data)], config)
        assert data["_sudo"] is True and data["_sudo_user"] == "admin" and data["_shell_executable"] == "bash"
        assert _resolved(data, kwargs, config) == plain, kwargs
    assert plain["_chdir"] == "/tmp" and plain["_sudo"] is True and plain["_sudo_user"] == "admin"


def test_a_mutable_default_is_not_shared_between_operations() -> None:
    config = Config()
    data: dict[str, Any] = {}
    with_defaults([("node1", data)], config)
    first = _resolved(data, {}, config)
    first["_success_exit_codes"].append(3)
    assert _resolved(data, {}, config)["_success_exit_codes"] == [0]
