"""mara_agents: schedulers for core_env behind one batched interface (:class:`Agent`).

Heuristics live in :mod:`mara_agents.heuristics` (numpy only); :mod:`mara_agents.bounds` holds upper
bounds on the completion rate. Learned agents (torch) will share the same interface.
"""

from __future__ import annotations

from mara_agents.protocols import Agent, PettingZooPolicy

__all__ = ["Agent", "PettingZooPolicy"]
