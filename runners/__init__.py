"""Everything that executes: run specs, the registry, simulators, executors, manifests.

Imports no Django. Public API for the portal: ``registry``, ``spec.validate``/``SpecError``,
``rundir`` (the run-directory contract) and ``executors.local``.
"""
