"""The node runs the distribution release and CPU architecture its node group says (platform table row)."""

from __future__ import annotations

from gpuforge.probes.platform import runs
from gpuforge.validator.node.base import CRITICAL, FAIL, PASS, SKIP, Outcome
from gpuforge.validator.node.framework import NodeContext, check
from gpuforge.validator.node.inputs import OS_RELEASE


@check("hardware.platform", "hardware", CRITICAL, "the node runs the spec's OS release and CPU architecture",
       needs=("os_release",))  # fmt: skip
def _platform(ctx: NodeContext) -> Outcome:
    want = ctx.cfg.get("platform")
    if not isinstance(want, dict):
        return SKIP, "the node's config names no platform (rendered by an older gpuforge)"
    info = ctx.read(OS_RELEASE)
    spec_says = f"the spec says {want['title']} on {want['arch']}"
    if info.os_id is None:
        return FAIL, f"cannot read /etc/os-release; {spec_says}"
    if not runs(info, want["os_id"], want["version_id"]):
        return FAIL, f"/etc/os-release says {info.os_id} {info.version_id or '(no VERSION_ID)'}; {spec_says}"
    if info.machine != want["arch"]:
        return FAIL, f"uname -m says {info.machine or 'nothing'}; {spec_says} (packages would be for another CPU)"
    return PASS, f"{want['title']} ({info.os_id} {info.version_id}) on {info.machine}, as the spec says"
