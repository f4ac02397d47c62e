"""Statuses, layers, severities and the config type every part of the node checker shares."""

from __future__ import annotations

from typing import Any

SCHEMA_VERSION = 1
DEFAULT_CONFIG = "/etc/gpuforge/health.json"
#: Drain reasons of this program. Other gpuforge drains ("gpuforge: rolling change") are not ours.
REASON_TAG = "gpuforge: health:"
MAX_REASON = 200

PASS, FAIL, SKIP, BLOCKED = "pass", "fail", "skip", "blocked"
STATUSES = (PASS, FAIL, SKIP, BLOCKED)
#: A site check (testinfra) that could not judge: it counts as a failure, never as passed.
ERROR = "error"
LAYERS = (
    "connection", "hardware", "config", "driver", "toolkit", "container", "scheduler", "job", "monitoring", "security",
    "site",
)  # fmt: skip
CRITICAL, WARNING, INFO = "critical", "warning", "info"
SEVERITIES = (CRITICAL, WARNING, INFO)

Config = dict[str, Any]
Outcome = tuple[str, str]
