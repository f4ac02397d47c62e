"""pyinfra facts: every node reading of :mod:`gpuforge.probes` through one adapter.

``reading_fact(READING)`` (:mod:`gpuforge.deploy.facts.adapter`) makes the pyinfra fact of any
reading; the deploys name the ones they read (``NvidiaHost``, ``SacctmgrEntities``, ``LayerState``).
The node program runs the same readings' commands and parsers, so a fact and a node check never
disagree on what a node said. Missing tools and failing commands are reported in the value
(``available``, ``rc``, ``error``) instead of failing the fact.
"""
