"""Kubernetes nodes in a campaign: who is in service, cordon and taint a failed node, label a spare in.

Pure builders and parsers (kubectl facts: :data:`gpuforge.acceptance.kube_actions.SOURCES`).
Invariants: a node is cordoned by the campaign only while nobody else holds it (the read and the
cordon are one snippet on the control plane: an operator's or a rollout's cordon is kept, never
marked, never undone); a spare moves in by getting its pool's labels and losing only the pool's
spare taints that it carries.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field

from gpuforge.acceptance.kube_actions import CORDON_MARK, FAILED_TAINT, REASON_ANNOTATION, _jp
from gpuforge.orchestrate.k8s_drain import CORDONED_BY, KUBECTL


def nodes_command(label_keys: list[str]) -> str:
    """One ``GFNODE name|unschedulable|cordon mark|Ready|taint,...|<label value>|...`` line per node."""
    labels = "".join('{"|"}{.metadata.labels.' + _jp(k) + "}" for k in label_keys)
    path = ('{range .items[*]}{"GFNODE "}{.metadata.name}{"|"}{.spec.unschedulable}{"|"}{.metadata.annotations.'
            + _jp(CORDONED_BY) + '}{"|"}{.status.conditions[?(@.type=="Ready")].status}{"|"}{range .spec.taints[*]}'
            '{.key}{"="}{.value}{":"}{.effect}{","}{end}' + labels + '{"\\n"}{end}')  # fmt: skip
    return f"{KUBECTL} get nodes -o jsonpath={shlex.quote(path)}"


@dataclass(frozen=True)
class NodeView:
    name: str
    unschedulable: bool
    mark: str
    ready: str
    taints: tuple[str, ...] = ()
    labels: dict[str, str] = field(default_factory=dict)

    @property
    def failed_here(self) -> bool:
        return any(t.startswith(f"{FAILED_TAINT}=") for t in self.taints)

    @property
    def in_service(self) -> bool:
        return not self.unschedulable and self.ready == "True" and not self.failed_here

    def why_out(self) -> str:
        if self.unschedulable:
            return "cordoned" + (" by gpuforge accept" if self.mark == CORDON_MARK else f" ({self.mark or 'operator'})")
        if self.ready != "True":
            return f"not Ready ({self.ready or 'unknown'})"
        return "tainted " + FAILED_TAINT if self.failed_here else "in service"

    def has_taint(self, spec_taint: str) -> bool:
        """``key[=value]:Effect`` of the spec is on the node (same key and effect)."""
        key, effect = spec_taint.split("=", 1)[0].split(":", 1)[0], spec_taint.rsplit(":", 1)[1]
        return any(t.split("=", 1)[0] == key and t.rsplit(":", 1)[1] == effect for t in self.taints)


def parse_nodes(text: str, label_keys: list[str]) -> dict[str, NodeView]:
    out = {}
    for line in text.splitlines():
        if not line.startswith("GFNODE "):
            continue
        parts = line[7:].split("|")
        parts += [""] * (5 + len(label_keys) - len(parts))
        name, unsched, mark, ready, taints = parts[:5]
        labels = {k: v for k, v in zip(label_keys, parts[5:], strict=False) if v}
        out[name] = NodeView(name, unsched == "true", mark, ready, tuple(t for t in taints.split(",") if t), labels)
    return out


def taint_value(step: str) -> str:
    """A step name as a taint value (letters, digits, ``-_.``, 63 at most)."""
    return re.sub(r"[^A-Za-z0-9_.-]", "-", step)[:63].strip("-_.") or "failed"


def cordon_command(node: str, reason: str, step: str) -> str:
    """Cordon and taint ``node`` with the acceptance mark and ``reason``, unless someone else cordoned it:
    ``GFCORDON <node> cordoned|kept <mark>|error <text>`` (a subshell: commands for many nodes join with newlines)."""
    n, k = shlex.quote(node), KUBECTL
    read = f"{k} get node {n} -o jsonpath='{{.spec.unschedulable}}|{{.metadata.annotations.{_jp(CORDONED_BY)}}}'"
    mark = shlex.quote(f"{CORDONED_BY}={CORDON_MARK}")
    why = shlex.quote(f"{REASON_ANNOTATION}={reason}")
    taint = shlex.quote(f"{FAILED_TAINT}={taint_value(step)}:NoSchedule")
    act = (f"{k} annotate node {n} --overwrite {mark} {why} 2>&1 && {k} cordon {n} 2>&1 && "
           f"{k} taint node {n} --overwrite {taint} 2>&1")  # fmt: skip
    return (
        f'(s=$({read} 2>&1) || {{ echo "GFCORDON {node} error $s"; exit 0; }}; '
        f'case "$s" in "true|{CORDON_MARK}") ;; true*) echo "GFCORDON {node} kept ${{s#*|}}"; exit 0;; esac; '
        f'if e=$({act}); then echo "GFCORDON {node} cordoned"; else echo "GFCORDON {node} error $e"; fi)'
    )


def spare_in_command(node: str, labels: dict[str, str], remove_taints: list[str]) -> str:
    """Give ``node`` its pool's labels and remove the spare taints it carries: ``GFSPARE <node> moved|error``."""
    n, k = shlex.quote(node), KUBECTL
    steps = [f"{k} label node {n} --overwrite " + " ".join(shlex.quote(f"{a}={b}") for a, b in sorted(labels.items()))]
    for t in remove_taints:
        key, effect = t.split(":", 1)[0].split("=", 1)[0], t.rsplit(":", 1)[1]
        steps.append(f"{k} taint node {n} {shlex.quote(f'{key}:{effect}-')}")
    act = " 2>&1 && ".join(steps) + " 2>&1"
    return f'(if e=$({act}); then echo "GFSPARE {node} moved"; else echo "GFSPARE {node} error $e"; fi)'
