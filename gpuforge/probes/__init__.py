"""Stdlib-only code that reads nodes: parsers of command output and programs run on nodes.

Nothing here imports anything outside the standard library, so it can be shipped to a node.
"""
