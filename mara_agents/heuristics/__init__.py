"""Heuristic schedulers (numpy only), all behind :class:`mara_agents.protocols.Agent`.

``HEURISTICS`` maps each name used in benchmarks and docs to its class (construct with no arguments
for the defaults; ``RandomAgent`` takes a ``seed``).
"""

from __future__ import annotations

from mara_agents.heuristics.base import PriorityAgent, serve_in_order
from mara_agents.heuristics.clairvoyant import Clairvoyant
from mara_agents.heuristics.edf import EDF
from mara_agents.heuristics.fifo import FIFO
from mara_agents.heuristics.las import LAS
from mara_agents.heuristics.random import RandomAgent
from mara_agents.heuristics.target_edf import TargetEDF
from mara_agents.heuristics.window_edf import WindowEDF

HEURISTICS = {"random": RandomAgent, "fifo": FIFO, "edf": EDF, "las": LAS, "clairvoyant": Clairvoyant, "window-edf": WindowEDF, "target-edf": TargetEDF}

__all__ = ["EDF", "FIFO", "LAS", "HEURISTICS", "Clairvoyant", "PriorityAgent", "RandomAgent", "TargetEDF", "WindowEDF", "serve_in_order"]
