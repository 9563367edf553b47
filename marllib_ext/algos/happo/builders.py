"""The ``happo`` config: MAPPO's, refused where a team would have one policy."""

from __future__ import annotations

from ray.rllib.algorithms.ppo import PPOConfig

from marllib_ext.algos.config import CentralCriticSettings
from marllib_ext.algos.happo.learner import HAPPOLearner
from marllib_ext.algos.policy_sharing import policy_mapping
from marllib_ext.algos.ppo.builders import build_mappo
from marllib_ext.envs.handle import EnvHandle
from marllib_ext.errors import ConfigError


def check_heterogeneous(env: EnvHandle, share_policy: str) -> None:
    """HAPPO needs several policies in a team to update one after another."""
    mapping = policy_mapping(env, share_policy)
    for team, agents in env.layout.teams.items():
        policies = {mapping[agent] for agent in agents}
        if len(agents) > 1 and len(policies) == 1:
            raise ConfigError(
                f"happo updates policies one after another; share_policy={share_policy!r} "
                f"gives team {team!r} of env {env.name!r} one policy. Use "
                "share_policy='individual' (or 'group' where the team has several groups)"
            )


def build_happo(
    settings: CentralCriticSettings,
    env: EnvHandle,
    share_policy: str,
    seed: int | None,
    *,
    learner_class: type[HAPPOLearner] = HAPPOLearner,
    extra_inputs: int = 0,
) -> PPOConfig:
    """HAPPO: MAPPO's central critic, actors updated sequentially with the factor M."""
    check_heterogeneous(env, share_policy)
    return build_mappo(
        settings, env, share_policy, seed, learner_class=learner_class, extra_inputs=extra_inputs
    )
