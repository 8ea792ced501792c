"""Training core_env with third-party MARL/RL libraries (each behind an optional extra).

=====================================  ==========================================  ================
module                                 what                                        extra
=====================================  ==========================================  ================
``tianshou_ppo``                       masked PPO, one shared policy, Tianshou's   ``agents``
                                       Collector + OnPolicyTrainer; Agent loader
``sb3_maskable``                       sb3-contrib MaskablePPO, Gymnasium view     ``sb3``
``rllib_ppo``                          RLlib PPO + action-masking RLModule on the  ``rllib`` (own venv)
                                       PettingZoo parallel env, shared policy
``torchrl_ppo``                        TorchRL PettingZooWrapper + MAPPO/IPPO loop ``torchrl``
``benchmarl_task``                     BenchMARL task (YAML in benchmarl_conf/)    ``benchmarl`` (own venv)
=====================================  ==========================================  ================

``checkpoints/tianshou_ppo/`` holds the shipped Tianshou policy (``tianshou_ppo.load_agent()``), the
benchmark row "PPO (Tianshou)".

Tutorials: ``docs/tutorials/``. Importing this package imports none of the libraries.
"""
