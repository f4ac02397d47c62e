"""Acceptance campaigns (``gpuforge accept``): burn-in and diagnostics as the cluster's own jobs.

- :mod:`.node_runner`: the node side (standard library only, shipped in the job's environment)
- :mod:`.tools`: the programs and their exact command lines, with where each flag is documented
- :mod:`.batch`: jobs per partition or leaf switch, the batch script, reading its output
- :mod:`.kube_actions`, :mod:`.kube_nodes`, :mod:`.kube_campaign`: Kubernetes campaigns (a Job per
  worker through kubectl on the first control plane; cordon and taint; spares by labels and taints)
- :mod:`.browser`: the HTML report opened in a real headless Chromium (tests, bench)
- :mod:`.parsers`: pure parsers and judges of stress-ng, fio, dcgmi diag, nccl-tests, gpuforge-health
- :mod:`.outliers`: median and MAD per (group, step, metric); the nodes below their peers
- :mod:`.campaign`: submit, wait, collect, judge, drain
- :mod:`.spares`, :mod:`.replace`: hot spares and ``gpuforge replace``
- :mod:`.results`, :mod:`.report`, :mod:`.html`: the campaign document, terminal and HTML forms
- :mod:`.cli`: the typer commands

The room sits beside ``orchestrate``: it may use spec, render, probes, validator, deploy's pure
helpers and orchestrate; none of them imports it (tests/architecture/test_layering.py).
"""
