"""The EFX configs (``efx_mappo``, ``efx_vdppo``, ``efx_happo``, ``efx_hatrpo``): the joint-critic
pipeline's config with the budget connector on the env runners, the EFX learner, the
outer-loop callbacks and, with ``budget_temperature``, the budget-scaled actors."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable

from ray.rllib.algorithms.ppo import PPOConfig
from ray.rllib.algorithms.ppo.torch.default_ppo_torch_rl_module import DefaultPPOTorchRLModule
from ray.rllib.core.rl_module.multi_rl_module import MultiRLModuleSpec

from marllib_ext.algos.efx.callbacks import (
    log_episode_returns,
    play_evaluation_budget,
    update_budget,
)
from marllib_ext.algos.efx.learners import (
    EFXHAPPOLearner,
    EFXHATRPOLearner,
    EFXJointCriticLearner,
    EFXVDLearner,
)
from marllib_ext.algos.efx.settings import EFXFields
from marllib_ext.algos.happo.builders import build_happo
from marllib_ext.algos.ppo.builders import build_mappo, build_vdppo
from marllib_ext.algos.ppo.novelty import with_rnd_module
from marllib_ext.envs.handle import EnvHandle
from marllib_ext.envs.time_feature import TIME_FEATURE_ARG
from marllib_ext.errors import ConfigError
from marllib_ext.policies.budget_actor import (
    TEMPERATURE_HIDDEN_KEY,
    TEMPERATURE_INPUTS_KEY,
    BudgetTemperatureActor,
)
from marllib_ext.postprocessing.budget_connector import BudgetObservationConnector
from marllib_ext.postprocessing.budget_input import BudgetInput


def budget_connector_factory(env, spaces, device, *, settings, seed):
    return [BudgetObservationConnector(settings=settings, seed=seed)]


def with_budget_temperature(config: PPOConfig, env: EnvHandle, hidden: int) -> None:
    """Every actor becomes a ``BudgetTemperatureActor`` fed the budget column (and the
    time-left column before it when the env runs with ``time_feature``)."""
    inputs = BudgetInput.extra_inputs() + int(bool(env.env_args.get(TIME_FEATURE_ARG)))
    specs = dict(config.rl_module_spec.rl_module_specs)  # completed copies
    for module_id, spec in specs.items():
        if spec.learner_only or spec.module_class is not DefaultPPOTorchRLModule:
            continue  # critics and mixers
        model_config = spec.model_config
        if dataclasses.is_dataclass(model_config):
            model_config = dataclasses.asdict(model_config)
        specs[module_id] = dataclasses.replace(
            spec,
            module_class=BudgetTemperatureActor,
            model_config={
                **(model_config or {}),
                TEMPERATURE_INPUTS_KEY: inputs,
                TEMPERATURE_HIDDEN_KEY: hidden,
            },
        )
    config.rl_module(rl_module_spec=MultiRLModuleSpec(rl_module_specs=specs))


def _with_budget(base_builder, learner_class: type, name: str) -> Callable[..., PPOConfig]:
    """A registry builder: ``base_builder`` + z-conditioned actors + budget outer loop.

    ``settings`` arrive with the budget range resolved (the registry's ``resolve``)."""

    def build(
        settings: EFXFields, env: EnvHandle, share_policy: str, seed: int | None
    ) -> PPOConfig:
        config = base_builder(
            settings,
            env,
            share_policy,
            seed,
            learner_class=learner_class,
            extra_inputs=BudgetInput.extra_inputs(),
        )
        if settings.push_gradient == "temperature" and not issubclass(
            learner_class, EFXJointCriticLearner
        ):
            raise ConfigError(
                f"push_gradient: temperature is not supported by {name} (its actor loss "
                "is HAPPO's); use push_gradient: policy"
            )
        if settings.budget_temperature:
            with_budget_temperature(config, env, settings.budget_temperature_hidden)
        teams = [list(budget.agents) for budget in settings.team_budgets]
        with_rnd_module(config, settings, env, seed, teams)
        return config.env_runners(
            env_to_module_connector=functools.partial(
                budget_connector_factory, settings=settings, seed=seed
            )
        ).callbacks(
            on_episode_end=log_episode_returns,
            on_train_result=update_budget,
            on_evaluate_start=play_evaluation_budget,
        )

    build.__doc__ = f"{name}: {base_builder.__doc__}"
    return build


# The joint critic sees the budget too: V(s, z) for MAPPO, V_i(o_i, z) mixed on (s, z)
# for VDPPO (extra_inputs=1).
build_efx_mappo = _with_budget(build_mappo, EFXJointCriticLearner, "efx_mappo")
build_efx_vdppo = _with_budget(build_vdppo, EFXVDLearner, "efx_vdppo")
build_efx_happo = _with_budget(build_happo, EFXHAPPOLearner, "efx_happo")
# HAPPO's builder (heterogeneous policies, MAPPO's critic) with HATRPO's learner.
build_efx_hatrpo = _with_budget(build_happo, EFXHATRPOLearner, "efx_hatrpo")
