"""Stdlib-only code that reads nodes: each node reading (:class:`gpuforge.probes.reading.Reading`,
its command and the parser of its output) and programs run on nodes.

Nothing here imports anything outside the standard library, so it can be shipped to a node.
:mod:`gpuforge.probes.index` lists every reading by name.
"""
