"""Review item 6: no digest of a file holding credentials in a world-readable place.

``/etc/gpuforge/health.json`` listed the sha256 of Alertmanager's config, whose webhook URL holds
a password: the rest of the file is known from the spec, so a word list recovers the password
from the digest. Files holding credentials (secrets, files shown redacted) are compared by owner
and mode there, and the config itself is 0600 (the health check runs as root).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from gpuforge.render import render_node
from gpuforge.render.health import HEALTH_CONFIG
from gpuforge.render.monitoring import ALERTMANAGER_CONFIG
from gpuforge.spec import resolve_nodes
from tests.validator.vhelpers import lab_spec

PASSWORD = "s3cretpass"


def with_webhook(data: dict[str, Any]) -> None:
    url = f"https://alertuser:{PASSWORD}@hooks.example.org/services/T0/B0PATH"
    data["monitoring"]["receivers"] = [{"name": "ops", "webhook_url": url}]


def test_health_json_holds_no_digest_of_a_credential_file_and_is_root_only(tmp_path: Path) -> None:
    spec, _ = lab_spec(tmp_path, with_webhook)
    node = next(n for n in resolve_nodes(spec) if n.name == "node1")
    files = {f.path: f for f in render_node(spec, node)}
    health = files[HEALTH_CONFIG]
    assert health.mode == "0600"
    entries = {e["path"]: e for e in json.loads(health.data)["config_files"]}
    alert = files[ALERTMANAGER_CONFIG]
    assert PASSWORD.encode() in alert.data  # the node's file does hold the password
    assert entries[ALERTMANAGER_CONFIG]["sha256"] is None
    assert hashlib.sha256(alert.data).hexdigest() not in health.data.decode()
    assert entries[ALERTMANAGER_CONFIG]["mode"] == alert.mode.zfill(4), "owner and mode still compared"
    plain = [e for e in entries.values() if e["sha256"] is not None]
    assert plain, "files without credentials keep their digest"
