"""Moved: the ``prior-edf`` row (:class:`PriorEDF`, its probe fit :func:`fitted_probe` and
:func:`make_prior_edf`) lives in :mod:`mara_agents.heuristics.prior_edf`, which fits the probe without
``benchmarks`` (no import circle agents → prior_edf → decision_points → agents); this path re-exports it.
Patch ``fitted_probe`` on :mod:`mara_agents.heuristics.prior_edf`, where :func:`make_prior_edf` looks it up."""

from __future__ import annotations

from mara_agents.heuristics.prior_edf import NAME, PriorEDF, fitted_probe, make_prior_edf

__all__ = ["NAME", "PriorEDF", "fitted_probe", "make_prior_edf"]
