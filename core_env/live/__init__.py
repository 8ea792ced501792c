"""Live execution: the schedulers' tasks as real training runs (issue 32).

:mod:`core_env.live.tasks` — the live task protocol (train ``n`` batches, ``state_dict`` /
``load_state_dict``) and every corpus family's runs as live tasks; :mod:`core_env.live.source` — the live
task source through the engine's task-source seam (:mod:`core_env.task_source`) and the offline
recording of the same runs as a curve bank, so one workload plays live and in simulation;
:mod:`core_env.live.workers` — the nodes as workers (in this process, one process each, or Ray actors);
:mod:`core_env.live.calibration` — the simulator's rates, node speeds, switching cost and their spread
fitted to live services; :mod:`core_env.live.replay` — live measurements replayed in the simulator (a
recorded episode's services exactly, or the calibrated model with its spread); :mod:`core_env.live.toy` —
a numpy-only task for quick checks.
"""

from core_env.live.source import LiveSource, record_bank
from core_env.live.tasks import LIVE_FAMILIES, CorpusMLPTask, LiveTask, TaskSpec, build_task

__all__ = ["CorpusMLPTask", "LIVE_FAMILIES", "LiveSource", "LiveTask", "TaskSpec", "build_task", "record_bank"]
