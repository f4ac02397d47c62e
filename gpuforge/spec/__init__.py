"""The typed cluster spec: models, hostlists, GPU catalog, rules and loading."""

from gpuforge.spec.errors import SpecError, SpecIssue
from gpuforge.spec.load import load_or_exit, load_spec, parse_spec, spec_json_schema
from gpuforge.spec.model import Role, Scheduler, Spec
from gpuforge.spec.nodes import LIMIT_HELP, Node, nodes_with, resolve_nodes, select_limit, select_nodes
from gpuforge.spec.policy import UpdatePolicy

__all__ = [
    "LIMIT_HELP",
    "Node",
    "Role",
    "Scheduler",
    "Spec",
    "SpecError",
    "SpecIssue",
    "UpdatePolicy",
    "load_or_exit",
    "load_spec",
    "nodes_with",
    "parse_spec",
    "resolve_nodes",
    "select_limit",
    "select_nodes",
    "spec_json_schema",
]
