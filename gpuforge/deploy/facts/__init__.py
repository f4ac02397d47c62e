"""pyinfra facts for GPU cluster nodes, one module per domain.

- :mod:`gpuforge.deploy.facts.nvidia`: PCI devices, nvidia-smi inventory, driver version, remapped rows,
  NVLink, Xid errors, kernel modules, NVSwitch devices
- :mod:`gpuforge.deploy.facts.mig`: MIG mode, MIG devices, mig-parted assert
- :mod:`gpuforge.deploy.facts.packages`: Debian package versions
- :mod:`gpuforge.deploy.facts.dcgm`: ``dcgmi diag`` and dcgm-exporter metrics
- :mod:`gpuforge.deploy.facts.slurm`: sinfo/scontrol/sacctmgr/slurmd facts
- :mod:`gpuforge.deploy.facts.systemd`: unit states
- :mod:`gpuforge.deploy.facts.files`: file digests, modes and owners

Every fact keeps its parsing in a pure ``parse_*`` function in the same module so that the
validator can run the command locally and reuse the parser. Results are JSON-serialisable
TypedDicts. Missing tools and failing commands are reported in the result (``available``,
``rc``, ``error``) instead of failing the fact.
"""
