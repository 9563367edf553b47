"""Config builders of the four safe-MARL algorithms on the MAPPO pipeline."""

from __future__ import annotations

from marllib_ext.algos.ppo.builders import build_joint_critic_ppo, central_critic_spec
from marllib_ext.algos.safe.callbacks import log_episode_cost, update_cost_multiplier
from marllib_ext.algos.safe.cup import CUPLearner
from marllib_ext.algos.safe.focops import FOCOPSLearner
from marllib_ext.algos.safe.learner import PIDLagLearner, SafeJointCriticLearner
from marllib_ext.envs.handle import EnvHandle


def _safe_builder(learner_class: type[SafeJointCriticLearner], name: str):
    def build(settings, env: EnvHandle, share_policy: str, seed: int | None):
        config = build_joint_critic_ppo(
            settings,
            env,
            share_policy,
            seed,
            learner_class=learner_class,
            critic_spec=lambda mapping, agents: central_critic_spec(settings, env, cost_head=True),
        )
        return config.callbacks(
            on_episode_end=log_episode_cost, on_train_result=update_cost_multiplier
        )

    build.__doc__ = f"{name}: {learner_class.__doc__.splitlines()[0]}"
    return build


build_mappo_lag = _safe_builder(SafeJointCriticLearner, "mappo_lag")
build_mappo_pid_lag = _safe_builder(PIDLagLearner, "mappo_pid_lag")
build_mappo_cup = _safe_builder(CUPLearner, "mappo_cup")
build_mappo_focops = _safe_builder(FOCOPSLearner, "mappo_focops")
