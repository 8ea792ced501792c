"""MARA's allocator: a Multi-Agent Transformer (MAT) policy trained with PPO.

* :mod:`mara_agents.mat.model`: :class:`MATModel`, a pointer-style encoder/decoder whose weights depend
  on neither the number of nodes N nor of slots K; nodes choose tasks autoregressively in fixed order,
  a task taken by one node is masked for the later ones.
* :mod:`mara_agents.mat.ppo`: the PPO trainer, ``python -m mara_agents.mat.ppo --variant {mara,mara-wls,
  mara-sparse,mat} --seed S --minutes M --out DIR`` (resumable; writes ``DIR/mat.pt`` + ``DIR/mat.json``).
* :mod:`mara_agents.mat.agent`: :class:`MATAgent`, a trained policy behind the
  :class:`mara_agents.protocols.Agent` interface (``MATAgent.load(path)``); it rebuilds the predictor
  features from the observations it is given.

Torch is imported by the submodules only; importing this package is cheap.
"""

from __future__ import annotations

__all__ = ["MATAgent", "MATConfig", "MATModel"]


def __getattr__(name: str):
    if name in ("MATConfig", "MATModel"):
        from mara_agents.mat import model

        return getattr(model, name)
    if name == "MATAgent":
        from mara_agents.mat.agent import MATAgent

        return MATAgent
    raise AttributeError(f"module 'mara_agents.mat' has no attribute {name!r}")
