"""Benchmark rows: a name for every agent a suite can run, and how to build it.

A row is a heuristic (``HEURISTICS``), or an allocator (``ALLOCATORS``) on its default predictor, or
``ALLOCATOR:PREDICTOR`` for the same allocator on another predictor (``lara:oracle`` is LARA's
allocator with exact demands: the part of LARA's gap that is allocation, not prediction).
"""

from __future__ import annotations

from mara_agents.allocators import ALLOCATORS
from mara_agents.heuristics import HEURISTICS
from mara_agents.protocols import Agent

#: Rows of the quick suite, in table order.
QUICK_ROWS = ("random", "fifo", "edf", "las", "edf-admission", "llf", "slaq", "laira", "lara", "lara-fm",
              "edf-admission:oracle", "llf:oracle", "laira:oracle", "lara:oracle", "clairvoyant")


def make_agent(row: str, seed: int = 0) -> Agent:
    """The agent of a benchmark row (see the module docstring); ``seed`` seeds the random agent."""
    name, _, predictor = row.partition(":")
    if name in HEURISTICS and not predictor:
        return HEURISTICS[name](seed) if name == "random" else HEURISTICS[name]()
    if name in ALLOCATORS:
        return ALLOCATORS[name](predictor) if predictor else ALLOCATORS[name]()
    raise ValueError(f"unknown agent row {row!r}: heuristics {sorted(HEURISTICS)}, allocators {sorted(ALLOCATORS)} "
                     "(optionally ':predictor', e.g. 'lara:oracle')")
