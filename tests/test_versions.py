"""v0 is gone: importing or making it raises a clear error that points to v1."""

from __future__ import annotations

import importlib
import sys

import gymnasium as gym
import pytest

import core_env


def test_importing_v0_raises_and_points_to_v1():
    sys.modules.pop("core_env.discrete_core_v0", None)
    with pytest.raises(ImportError, match=r"deadline from the task's hidden demand.*discrete_core_v1"):
        importlib.import_module("core_env.discrete_core_v0")


@pytest.mark.filterwarnings("ignore:.*out of date")
@pytest.mark.parametrize("env_id", ["core_env/DiscreteCoRE-v0", "core_env:core_env/DiscreteCoRE-v0"])
def test_making_v0_raises_and_points_to_v1(env_id):
    with pytest.raises(gym.error.DeprecatedEnv, match=r"DiscreteCoRE-v1"):
        gym.make(env_id)


def test_v1_is_the_registered_version():
    assert core_env.GYM_ID == "core_env/DiscreteCoRE-v1"
    env = gym.make(core_env.GYM_ID)
    observation, _ = env.reset(seed=0)
    assert observation["action_mask"].shape == (4, 17)


@pytest.mark.parametrize("env_type", ["parallel", "aec"])
def test_pettingzoo_v0_id_raises_where_the_registry_exists(env_type):
    import pettingzoo

    if not hasattr(pettingzoo, "register"):
        pytest.skip(f"PettingZoo {pettingzoo.__version__} has no registry")
    with pytest.raises(gym.error.DeprecatedEnv, match=r"discrete_core_v1"):
        pettingzoo.make(env_type, core_env.REMOVED_PETTINGZOO_ID)
    assert pettingzoo.make(env_type, core_env.PETTINGZOO_ID).possible_agents[0] == "node_0"


def test_the_repository_cites_only_its_own_documents():
    """Code and docs must not send a user to design notes that ship elsewhere (DESIGN.md, paper.md §, anchors.md)."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    pattern = re.compile(r"DESIGN\.md|DESIGN §|anchors\.md|paper\.md §|PAPER\.md|shared/docs|shared/research")
    offenders = []
    for top in ("core_env", "mara_agents", "benchmarks", "docs", "tests", "README.md", "Makefile", "pyproject.toml"):
        paths = [root / top] if (root / top).is_file() else (root / top).rglob("*")
        for path in paths:
            if path.is_file() and path.suffix in (".py", ".md", ".toml", "") and "results" not in path.parts and path.name != "test_versions.py":
                text = path.read_text(errors="ignore")
                offenders += [f"{path.relative_to(root)}: {m.group(0)}" for m in pattern.finditer(text)]
    assert not offenders, offenders
