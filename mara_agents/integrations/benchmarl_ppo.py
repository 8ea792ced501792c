"""The per-slot policy BenchMARL's MAPPO trains, as a benchmark row, played without BenchMARL.

Training runs in the rllib venv (:mod:`mara_agents.integrations.benchmarl_task`, ``--route batched --policy
slot``); this module imports neither BenchMARL nor TorchRL, so :func:`load_agent` plays the checkpoint in the
main venv as the row ``mappo-benchmarl``.
"""

from __future__ import annotations

from pathlib import Path

FORMAT = "mara_agents.integrations.benchmarl_task/1"
MISSING = ("no BenchMARL per-slot checkpoint (train one in the rllib venv with python -m mara_agents.integrations.benchmarl_task "
           "--route batched --policy slot --out DIR)")
ROW_NAME = "MAPPO (BenchMARL)"
#: The shipped per-slot policy (its train.json says how it was trained).
SHIPPED_CHECKPOINT = Path(__file__).resolve().parent / "checkpoints" / "benchmarl_mappo" / "policy.pt"


def load_agent(path: Path | str = SHIPPED_CHECKPOINT, deterministic: bool = True):
    """The trained per-slot policy of a checkpoint (``policy.pt`` or its run directory; default the shipped one)
    as a :class:`~mara_agents.integrations.slot_policy.SlotPolicyAgent` (greedy by default; no BenchMARL needed),
    the benchmark row ``mappo-benchmarl``. ValueError for a missing file or manifest, another format or a checksum mismatch."""
    from mara_agents.integrations import slot_policy

    return slot_policy.load_agent(path, FORMAT, MISSING, deterministic=deterministic, name=ROW_NAME)
