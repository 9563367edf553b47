"""Gymnasium multi-agent envs with Tuple spaces (LBF, RWARE) as PettingZoo ParallelEnvs.

Those envs take a tuple of actions, return a tuple of observations, a list of rewards
and one ``terminated`` / ``truncated`` flag for the team. Agent ``agent_<i>`` is entry
``i``; every agent acts at every step until the episode ends.

Both report their own step limit as ``terminated``; gymnasium calls it a truncation,
after which a value bootstraps. So an LBF episode ends ``terminated`` only when every
food is gone, and an RWARE episode (no terminal state: a step or inactivity limit)
always ``truncated``. (EPyMARL's runner bootstraps only where the env's info says
``episode_limit``, as SMAC's does; its gymma wrapper passes LBF's empty info, so there
the limit is terminal: the joint-Q setting ``bootstrap_truncated: false`` does the same.)

``action_masks=True`` (LBF only, ``--env-arg action_masks=true``) puts LBF's own legal
actions into each agent's info as ``action_mask``: a move into a wall or a food cell and
a load with no food beside the agent are left out (LBF turns them into ``NONE``). The
adapter then hands the masks to the policies. Why: a greedy LBF policy that picks such
an action leaves the state unchanged and repeats it to the step limit (EPyMARL's gymma
wrapper offers every action, so its default is off).

``food_levels="v1"`` (LBF only, ``--env-arg food_levels=v1``) draws each food's level as
lbforaging did before 2.0 (up to 1.1.x; the ``-v1`` ids of EPyMARL's paper): from
``[1, L - 1]``, where ``L`` is the sum of the three lowest player levels. lbforaging
2.0 (the ``-v3`` ids, the default ``"v3"``) draws from ``[1, L]``, so on a 3-player task
a food may need all three players to load together. With player levels 1-2 on
Foraging-10x10-3p-3f, about 26% of the foods need all three under v3 and about 3% under
v1. ``-coop`` tasks are the same under both (every food at level ``L``).
"""

from __future__ import annotations

import importlib
from typing import Any

import gymnasium as gym
import numpy as np
from pettingzoo.utils.env import ParallelEnv

from marllib_ext.envs.adapter import ACTION_MASK_KEY
from marllib_ext.errors import ConfigError, install_hint

# registry prefix -> (package that registers the gymnasium ids, pip extra)
FAMILIES = {"lbf": ("lbforaging", "lbf"), "rware": ("rware", "rware")}
FOOD_LEVELS = ("v3", "v1")


def import_family(family: str) -> None:
    package, extra = FAMILIES[family]
    try:
        importlib.import_module(package)
    except ImportError as e:
        raise ConfigError(
            f"{family}: envs need the {package!r} package: {install_hint(extra)} ({e})"
        ) from e


class TupleAgentsParallelEnv(ParallelEnv):
    """A Tuple-space gymnasium env seen as a ParallelEnv of ``agent_0..agent_{n-1}``."""

    metadata = {"name": "tuple_agents"}

    def __init__(self, env: gym.Env, family: str, *, action_masks: bool = False) -> None:
        if not isinstance(env.observation_space, gym.spaces.Tuple) or not isinstance(
            env.action_space, gym.spaces.Tuple
        ):
            raise ConfigError(
                f"{env.spec.id if env.spec else type(env).__name__}: expected Tuple "
                f"observation and action spaces, got {env.observation_space} and "
                f"{env.action_space}"
            )
        if not isinstance(action_masks, bool):
            raise ConfigError(f"action_masks must be true or false, got {action_masks!r}")
        if action_masks and family != "lbf":
            raise ConfigError(f"action_masks: only LBF reports its legal actions, not {family}")
        self.env = env
        self.family = family
        self.action_masks = action_masks
        n = len(env.observation_space.spaces)
        self.possible_agents = [f"agent_{i}" for i in range(n)]
        self.agents: list[str] = []
        self._obs_spaces = dict(
            zip(self.possible_agents, env.observation_space.spaces, strict=True)
        )
        self._act_spaces = dict(zip(self.possible_agents, env.action_space.spaces, strict=True))

    def observation_space(self, agent: str) -> gym.Space:
        return self._obs_spaces[agent]

    def action_space(self, agent: str) -> gym.Space:
        return self._act_spaces[agent]

    def _per_agent(self, values) -> dict[str, Any]:
        return dict(zip(self.possible_agents, values, strict=True))

    def reset(self, seed: int | None = None, options: dict | None = None):
        observations, info = self.env.reset(seed=seed, options=options)
        self.agents = list(self.possible_agents)
        return self._per_agent(observations), self._infos(info, self.agents)

    def _infos(self, info: dict, agents: list[str]) -> dict[str, dict]:
        infos = {a: dict(info) for a in agents}
        if self.action_masks:
            for agent, mask in zip(self.possible_agents, self.legal_actions(), strict=True):
                if agent in infos:
                    infos[agent][ACTION_MASK_KEY] = mask
        return infos

    def legal_actions(self) -> list[np.ndarray]:
        """Each agent's 0/1 legal actions (LBF's valid actions after the last step)."""
        unwrapped = self.env.unwrapped
        n_actions = [space.n for space in self.env.action_space.spaces]
        masks = []
        for player, n in zip(unwrapped.players, n_actions, strict=True):
            mask = np.zeros(n, np.float32)
            mask[[action.value for action in unwrapped._valid_actions[player]]] = 1.0
            masks.append(mask)
        return masks

    def step(self, actions: dict[str, Any]):
        joint = tuple(actions[a] for a in self.possible_agents)
        observations, rewards, terminated, truncated, info = self.env.step(joint)
        if terminated and not self.task_finished():
            terminated, truncated = False, True
        agents = list(self.agents)
        if terminated or truncated:
            self.agents = []
        return (
            self._per_agent(observations),
            {a: float(r) for a, r in self._per_agent(rewards).items()},
            dict.fromkeys(agents, bool(terminated)),
            dict.fromkeys(agents, bool(truncated)),
            self._infos(info, agents),
        )

    def task_finished(self) -> bool:
        """Whether an ended episode reached a terminal state (LBF: no food left), not
        the env's own step limit."""
        if self.family == "lbf":
            return not self.env.unwrapped.field.any()
        return False  # RWARE: episodes end by their step or inactivity limits only

    def render(self):
        return self.env.render()

    def close(self) -> None:
        self.env.close()


def episode_limit_of(env: gym.Env) -> int | None:
    """The episode length a Tuple-space env enforces itself (LBF: ``_max_episode_steps``,
    RWARE: ``max_steps``) or through gymnasium's ``TimeLimit``."""
    unwrapped = env.unwrapped
    for attribute in ("_max_episode_steps", "max_steps"):
        value = getattr(unwrapped, attribute, None)
        if isinstance(value, int):
            return value
    return env.spec.max_episode_steps if env.spec else None


def make_tuple_agents_env(
    family: str,
    env_id: str,
    *,
    action_masks: bool = False,
    food_levels: str = "v3",
    **kwargs: Any,
) -> TupleAgentsParallelEnv:
    """``gym.make(env_id, **kwargs)`` of an LBF or RWARE id, as a ParallelEnv
    (``action_masks``: LBF's legal actions in the infos; ``food_levels``: LBF's rule
    for drawing food levels, ``"v3"`` or ``"v1"``)."""
    if food_levels not in FOOD_LEVELS:
        raise ConfigError(f"food_levels must be one of {FOOD_LEVELS}, got {food_levels!r}")
    if food_levels != "v3" and family != "lbf":
        raise ConfigError(f"food_levels: only LBF has food, not {family}")
    import_family(family)
    try:
        env = gym.make(env_id, disable_env_checker=True, **kwargs)
    except gym.error.Error as e:
        raise ConfigError(f"env '{family}:{env_id}': {e}") from e
    if food_levels == "v1":
        draw_v1_food_levels(env.unwrapped)
    return TupleAgentsParallelEnv(env, family, action_masks=action_masks)


def draw_v1_food_levels(foraging_env: Any) -> None:
    """Makes an lbforaging 2.0 ``ForagingEnv`` draw food levels as lbforaging 1.x did.

    2.0 draws a non-coop food's level uniformly from ``[min, max]`` and 1.x from
    ``[min, max - 1]`` (``randint(min, max)``, excluding ``max``; a range of one
    level gives that level). So each food's upper bound drops by one, never below its
    lower bound. ``force_coop`` foods take ``max`` under both."""
    spawn_food = foraging_env.spawn_food

    def spawn_food_v1(max_num_food, min_levels, max_levels):
        if not foraging_env.force_coop:
            max_levels = np.maximum(np.asarray(max_levels) - 1, min_levels)
        spawn_food(max_num_food, min_levels, max_levels)

    foraging_env.spawn_food = spawn_food_v1
