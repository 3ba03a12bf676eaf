"""The one explicit table of systems and baselines the lab can run.

Each entry names its arena (the interface it implements), its role (system under test or
baseline), the modes it supports, its paper reference and its parameter schema with defaults.
Adding a baseline = one policy module + one line in ``ENTRIES``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

ARENAS = ("allreduce", "ps", "cluster")
ROLES = ("system", "baseline")
MODES = ("sim", "real")


@dataclass(frozen=True)
class Param:
    """One knob of a system, with its default. ``reconstructed`` marks a choice the paper leaves
    open (the harness labels such results)."""

    name: str
    kind: type
    default: Any
    help: str
    minimum: float | None = None
    maximum: float | None = None
    unit: str = ""
    reconstructed: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "type": self.kind.__name__,
            "default": self.default,
            "help": self.help,
            "minimum": self.minimum,
            "maximum": self.maximum,
            "unit": self.unit,
            "reconstructed": self.reconstructed,
        }


@dataclass(frozen=True)
class Entry:
    name: str
    arena: str
    role: str
    modes: tuple[str, ...]
    paper: str
    summary: str
    factory: str  # "module:function" building the policy from validated params
    params: tuple[Param, ...] = ()

    def defaults(self) -> dict[str, Any]:
        return {p.name: p.default for p in self.params}

    def build(self, params: dict[str, Any]) -> Any:
        """Instantiate the policy with ``params`` (already validated and completed)."""
        module_name, func_name = self.factory.split(":")
        factory: Callable[..., Any] = getattr(importlib.import_module(module_name), func_name)
        return factory(**params)

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "arena": self.arena,
            "role": self.role,
            "modes": list(self.modes),
            "paper": self.paper,
            "summary": self.summary,
            "params": [p.as_dict() for p in self.params],
        }


FP32_BYTES = 4

ENTRIES: tuple[Entry, ...] = (
    Entry(
        name="wfbp",
        arena="allreduce",
        role="baseline",
        modes=("sim",),
        paper="Zhang et al., Poseidon: wait-free backpropagation, USENIX ATC 2017",
        summary="One all-reduce per layer in gradient-ready (FIFO) order; the next forward waits "
        "for every gradient (global barrier).",
        factory="runners.policies.allreduce:wfbp",
    ),
    Entry(
        name="bytescheduler",
        arena="allreduce",
        role="baseline",
        modes=("sim",),
        paper="Peng et al., A generic communication scheduler for distributed DNN training "
        "acceleration (ByteScheduler), SOSP 2019",
        summary="Tensors split into partitions, sent in priority order (the layer the next "
        "forward needs first), at most `credit` bytes handed to the network at once; forward of "
        "layer i waits only for layer i (cross-barrier). Auto-tuning of credit/partition: not yet.",
        factory="runners.policies.allreduce:bytescheduler",
        params=(
            Param(
                "partition_bytes",
                int,
                8_000_000 * FP32_BYTES,
                "Tensors larger than this are split. Default = 8M fp32 parameters, the value "
                "ByteScheduler's docs recommend for all-reduce.",
                minimum=1024,
                unit="bytes",
            ),
            Param(
                "credit_bytes",
                int,
                16_000_000 * FP32_BYTES,
                "Most bytes handed to the network and not yet acknowledged. Default = 16M fp32 "
                "parameters, the docs' all-reduce recommendation (the tuner is not run).",
                minimum=1024,
                unit="bytes",
            ),
        ),
    ),
)

_BY_NAME = {e.name: e for e in ENTRIES}


class UnknownEntry(KeyError):
    pass


def get(name: str) -> Entry:
    try:
        return _BY_NAME[name]
    except KeyError:
        known = ", ".join(sorted(_BY_NAME))
        raise UnknownEntry(f"unknown system {name!r} (known: {known})") from None


def entries(arena: str | None = None) -> list[Entry]:
    return [e for e in ENTRIES if arena is None or e.arena == arena]


def baselines(arena: str) -> list[Entry]:
    return [e for e in entries(arena) if e.role == "baseline"]
