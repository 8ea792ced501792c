"""sb3-contrib MaskablePPO on the centralized Gymnasium view of core_env (extra ``sb3``).

The env's ``action_masks()`` returns the flat boolean mask of length N·(K+1): for a ``MultiDiscrete``
action space sb3-contrib expects exactly the per-dimension masks concatenated (its
``MaskableMultiCategoricalDistribution`` splits the mask by ``nvec``), so MaskablePPO never samples a
masked action. The nodes are independent dimensions of one ``MultiInputPolicy`` (one network for the whole
joint action); **conflicts** (two nodes on one task) are *not* prevented by the policy: the env resolves
them (the lowest-index node trains the task, the others idle) and counts them in ``conflicts``, which the
report shows.

``train`` steps its ``n_envs`` environments as one batch (:class:`mara_agents.integrations.sb3_vec.CoreVecEnv`
over one ``DiscreteCoREVectorEnv``); ``vectorized=False`` (``--dummy``) uses SB3's ``DummyVecEnv`` of
``n_envs`` Gymnasium views instead. Both see the same seeded episodes (env i seeded ``seed + i``), so they
train the same policy; the batched one spends less time in Python per step.

Run::

    python -m mara_agents.integrations.sb3_maskable --timesteps 20000 --out runs/sb3_maskable
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from mara_agents.integrations.common import SMALL_ENV, EpisodeLog, RecordEpisodes, make_gym_env


def train(env_kwargs: Mapping[str, Any] | None = None, *, timesteps: int = 20_000, n_steps: int = 512, n_envs: int = 2,
          batch_size: int = 128, n_epochs: int = 4, lr: float = 3e-4, ent_coef: float = 0.01, seed: int = 0,
          out: Path | str | None = None, threads: int | None = 1, verbose: bool = True, vectorized: bool = True) -> dict[str, Any]:
    """Train MaskablePPO for ``timesteps`` env steps; return a report (losses, episodes, completion, masks).

    ``vectorized``: step the ``n_envs`` envs as one :class:`CoreVecEnv` (default) or as a ``DummyVecEnv``.
    """
    import torch
    from sb3_contrib import MaskablePPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.vec_env import DummyVecEnv

    previous_threads = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    env_kwargs = dict(env_kwargs or {})
    log = EpisodeLog()
    if vectorized:
        from mara_agents.integrations.sb3_vec import CoreVecEnv

        venv = CoreVecEnv(n_envs, **env_kwargs)
    else:
        venv = DummyVecEnv([lambda: make_gym_env(**env_kwargs) for _ in range(n_envs)])
    venv.seed(seed)
    losses: list[float] = []

    class LossRecorder(BaseCallback):
        """Reads train/loss after each update (the logger is never dumped, so the value stays readable) and
        logs the final statistics of every finished episode (the info of an env whose ``done`` is set)."""

        def _read(self) -> None:
            value = self.model.logger.name_to_value.get("train/loss")
            if value is not None and (not losses or self.model._n_updates != self._seen):
                losses.append(float(value))
                self._seen = self.model._n_updates

        def _on_training_start(self) -> None:
            self._seen = 0

        def _on_rollout_start(self) -> None:
            self._read()

        def _on_step(self) -> bool:
            for info, done in zip(self.locals["infos"], self.locals["dones"]):
                if done:
                    log.add(info)
            return True

        def _on_training_end(self) -> None:
            self._read()

    model = MaskablePPO("MultiInputPolicy", venv, n_steps=n_steps, batch_size=batch_size, n_epochs=n_epochs, learning_rate=lr,
                        ent_coef=ent_coef, gamma=0.99, gae_lambda=0.95, seed=seed, verbose=0,
                        policy_kwargs={"net_arch": [64, 64]})
    start = time.perf_counter()
    model.learn(total_timesteps=timesteps, callback=LossRecorder(), log_interval=10**9)
    seconds = time.perf_counter() - start
    torch.set_num_threads(previous_threads)
    quarter = max(1, len(log) // 4)
    report = {"library": "sb3-contrib", "algorithm": "MaskablePPO", "vec_env": type(venv).__name__, "env": env_kwargs,
              "env_steps": int(model.num_timesteps),
              "updates": len(losses), "seconds": round(seconds, 2), "loss": losses, "episodes": log.episodes,
              "first": EpisodeLog(log.episodes[:quarter]).summary(), "last": log.summary(quarter), "all": log.summary(),
              "conflict_rule": "independent MultiDiscrete dimensions; env resolves conflicts (lowest index wins) and counts them"}
    if verbose:
        print(f"sb3-contrib MaskablePPO: {report['env_steps']} steps, {len(losses)} updates, {len(log)} episodes in {seconds:.1f}s; "
              f"completion first quarter {report['first'].get('completion_rate', float('nan')):.3f} -> last quarter "
              f"{report['last'].get('completion_rate', float('nan')):.3f}; invalid actions {report['all'].get('invalid_actions')}, "
              f"conflicts {report['all'].get('conflicts')}")
    report["model"] = model
    if out is not None:
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        model.save(out / "maskable_ppo.zip")
        (out / "train.json").write_text(json.dumps({k: v for k, v in report.items() if k != "model"}, indent=1, default=float) + "\n")
    venv.close()
    return report


def evaluate(model: Any, env_kwargs: Mapping[str, Any], seeds: list[int] | range, deterministic: bool = True) -> dict[str, float]:
    """Completion, invalid actions and conflicts of a MaskablePPO model, one episode per seed, masks passed to ``predict``."""
    log = EpisodeLog()
    env = RecordEpisodes(make_gym_env(**env_kwargs), log)
    for seed in seeds:
        obs, _ = env.reset(seed=int(seed))
        done = False
        while not done:
            action, _ = model.predict(obs, action_masks=env.action_masks(), deterministic=deterministic)
            obs, _, terminated, truncated, _ = env.step(np.asarray(action, dtype=np.int64))
            done = terminated or truncated
    env.close()
    return log.summary()


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m mara_agents.integrations.sb3_maskable", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("runs/sb3_maskable"))
    parser.add_argument("--timesteps", type=int, default=20_000)
    parser.add_argument("--n-steps", type=int, default=512, help="steps per env per rollout")
    parser.add_argument("--n-envs", type=int, default=2)
    parser.add_argument("--dummy", action="store_true", help="step the envs through SB3's DummyVecEnv instead of one CoreVecEnv")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--small", action="store_true", help=f"train on the small test config {SMALL_ENV}")
    parser.add_argument("--env", type=json.loads, default=None, help="core_env kwargs as JSON")
    parser.add_argument("--eval-episodes", type=int, default=8)
    args = parser.parse_args(argv)
    env_kwargs = dict(SMALL_ENV) if args.small else {}
    env_kwargs.update(args.env or {})
    report = train(env_kwargs, timesteps=args.timesteps, n_steps=args.n_steps, n_envs=args.n_envs, seed=args.seed, out=args.out,
                   vectorized=not args.dummy)
    if args.eval_episodes:
        report["eval_greedy"] = evaluate(report["model"], env_kwargs, range(10_000, 10_000 + args.eval_episodes))
        print(f"greedy eval on {args.eval_episodes} seeded episodes: {report['eval_greedy']}")
    return report


if __name__ == "__main__":
    main()
