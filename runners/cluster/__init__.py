"""The cluster arena: many jobs sharing a cluster of servers (OASiS, Harmony and their
baselines). ``sim`` is the event-driven simulator, ``speed`` the placement-aware throughput
model, ``policies`` the schedulers and placement rules; traces live in ``workloads.traces``."""
