"""pyinfra facts for GPU cluster nodes, one module per domain.

- :mod:`gpuforge.facts.nvidia`: PCI devices, nvidia-smi inventory, driver version, remapped rows,
  NVLink, Xid errors, kernel modules, NVSwitch devices
- :mod:`gpuforge.facts.mig`: MIG mode, MIG devices, mig-parted assert
- :mod:`gpuforge.facts.packages`: Debian package versions
- :mod:`gpuforge.facts.dcgm`: ``dcgmi diag`` and dcgm-exporter metrics
- :mod:`gpuforge.facts.slurm`: sinfo/scontrol/sacctmgr/slurmd facts
- :mod:`gpuforge.facts.systemd`: unit states
- :mod:`gpuforge.facts.files`: file digests, modes and owners

Every fact keeps its parsing in a pure ``parse_*`` function in the same module so that the
validator can run the command locally and reuse the parser. Results are JSON-serialisable
TypedDicts. Missing tools and failing commands are reported in the result (``available``,
``rc``, ``error``) instead of failing the fact.
"""
