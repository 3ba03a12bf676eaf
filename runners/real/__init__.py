"""Real mode: multi-process PyTorch training that executes the same communication plans as the
simulator, on gloo (CPU) or NCCL (GPU), on loopback or on an emulated network.

* ``engine``: the data-parallel engine (gradient-ready hooks, one communication thread that
  issues the plan's collectives in one order on every rank, per-layer optimizer updates and
  forward pre-hooks that wait only for the parameters they need).
* ``worker``: one rank's main program (started by ``torchrun``).
* ``testbed``: network namespaces, veth pairs and ``tc`` shaping (root only).
* ``launch``: checks, planning, launching the ranks and writing the run directory.

Importing this package does not import torch.
"""
