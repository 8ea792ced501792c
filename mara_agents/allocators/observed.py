"""Moved: :class:`ObservedTasks` lives in :mod:`mara_agents.observed` (allocators and predictors both import it
from there); this path re-exports it."""

from __future__ import annotations

from mara_agents.observed import ObservedTasks

__all__ = ["ObservedTasks"]
