"""The one algorithm registry: name -> settings class, RLlib config builder, what the
algorithm can do and which progress columns it reports."""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
from ray.rllib.algorithms.algorithm_config import AlgorithmConfig

from marllib_ext.algos import (
    coma,
    ddpg,
    efx,
    happo,
    joint_q,
    masac,
    ppo,
    roer,
    safe,
    team_replay,
    trust_region,
)
from marllib_ext.algos.config import (
    CentralCriticSettings,
    PPOSettings,
    build_settings,
    gaussian_only_settings,
)
from marllib_ext.algos.efx.budget_range import with_resolved_budget
from marllib_ext.algos.env_checks import log_contract_breaches, with_episode_end_callback
from marllib_ext.algos.evaluation import with_evaluation
from marllib_ext.algos.ppo.novelty import MAPPOSettings, VDPPOSettings
from marllib_ext.algos.ppo.phased import with_schedule
from marllib_ext.algos.ppo.schedule import (
    A2C,
    COMA,
    CUP,
    FOCOPS,
    HAPPO,
    HATRPO,
    PPO,
    TRPO,
    Schedule,
    ignored_keys,
)
from marllib_ext.algos.progress import ProgressColumn
from marllib_ext.configs.algo_files import known_sources, load_algo_yaml, merged_values
from marllib_ext.envs.handle import EnvHandle
from marllib_ext.errors import ConfigError
from marllib_ext.policies.actor_options import with_actor_options
from marllib_ext.policies.masked_actor import with_masked_actors
from marllib_ext.rllib_compat import with_settings
from marllib_ext.rollout.env_runner import BatchedEnvRunner
from marllib_ext.rollout.whole_episodes import COMPLETE_EPISODES, WholeEpisodeEnvRunner

Builder = Callable[[Any, EnvHandle, str, "int | None"], AlgorithmConfig]


@dataclass(frozen=True)
class Capabilities:
    """What an algorithm can run on and what it adds."""

    multi_agent_only: bool = True  # needs a multi-agent (PettingZoo) env
    single_agent_only: bool = False  # needs a gymnasium (single-agent) env
    continuous_actions: bool = True  # Box action spaces
    discrete_actions: bool = True  # Discrete action spaces
    needs_costs: bool = False  # the env must report info["cost"] (safe MARL)
    has_budget: bool = False  # EFX's team budget z (evaluate --z, outer loop)
    off_policy: bool = False  # replay buffer
    multi_team: bool = True  # mixed/competitive envs (one joint critic per team)
    # Turn-taking envs; False for the independent team-replay learners, which bootstrap
    # an agent from the next env step, where on such envs it is not observing.
    turn_based: bool = True
    sequential: bool = False  # policies updated in turn: a team needs several policies


def _no_progress(result: Mapping[str, Any]) -> dict[str, float]:
    return {}


def _same_settings(settings: Any, env: EnvHandle) -> Any:
    return settings


@dataclass(frozen=True)
class AlgoSpec:
    """One registered algorithm.

    ``resolve(settings, env)`` fills env-dependent settings (EFX's budget range) before
    the settings travel; ``progress(result)`` gives the values of ``progress_columns``
    from an RLlib result; ``schedule`` is what one iteration of an on-policy learner
    does (``None``: the off-policy families' own training step)."""

    name: str
    pipeline: str  # MARLlib's pipeline: IL (independent), CC (centralized critic), VD; SA
    settings_class: type
    build: Builder
    capabilities: Capabilities = Capabilities()
    progress_columns: tuple[ProgressColumn, ...] = ()
    progress: Callable[[Mapping[str, Any]], dict[str, float]] = _no_progress
    resolve: Callable[[Any, EnvHandle], Any] = _same_settings
    schedule: Schedule | None = None

    def ignored_keys(self) -> dict[str, str]:
        """``{key: reason}``: settings keys that no phase of the schedule reads."""
        if self.schedule is None:
            return {}
        fields = {f.name for f in dataclasses.fields(self.settings_class)}
        return ignored_keys(self.schedule, fields)

    @property
    def description(self) -> str:
        return load_algo_yaml(self.name).get("description", "")

    def settings(self, hyperparam_source: str, overrides: dict[str, Any] | None = None) -> Any:
        """Typed settings: YAML defaults for ``hyperparam_source`` updated by overrides."""
        if hyperparam_source != "common" and hyperparam_source not in known_sources(self.name):
            # Sources without a section simply use the common defaults; only flag typos.
            close = difflib.get_close_matches(hyperparam_source, known_sources(self.name), n=1)
            if close:
                raise ConfigError(
                    f"unknown hyperparam_source {hyperparam_source!r} for {self.name} "
                    f"(did you mean {close[0]!r}?)"
                )
        ignored = self.ignored_keys()
        for key in overrides or {}:
            if key in ignored:
                raise ConfigError(f"{key} is not used by {self.name}: {ignored[key]}")
        values = merged_values(self.name, hyperparam_source)
        values.update(overrides or {})
        return build_settings(
            self.settings_class,
            values,
            source=f"{self.name} ({hyperparam_source})",
            ignored_keys=tuple(ignored),
        )

    def check_env(self, env: EnvHandle) -> None:
        """Fails before anything starts when ``env`` does not fit the algorithm."""
        if self.capabilities.multi_agent_only and not env.is_multi_agent:
            raise ConfigError(f"{env.name!r} is a single-agent env; {self.name} is multi-agent")
        if not self.capabilities.continuous_actions and env.is_multi_agent:
            continuous = [
                agent
                for agent, space in env.layout.action_spaces.items()
                if isinstance(space, gym.spaces.Box)
            ]
            if continuous:
                raise ConfigError(
                    f"{self.name} supports discrete actions only, and env {env.name!r} has "
                    f"continuous (Box) actions for agents {continuous}"
                )
        if not self.capabilities.discrete_actions and env.is_multi_agent:
            discrete = [
                agent
                for agent, space in env.layout.action_spaces.items()
                if not isinstance(space, gym.spaces.Box)
            ]
            if discrete:
                raise ConfigError(
                    f"{self.name} supports continuous (Box) actions only, and env "
                    f"{env.name!r} has discrete actions for agents {discrete} (mpe tasks: "
                    "--env-arg continuous_actions=true; for discrete actions: "
                    f"{', '.join(algorithms_that(off_policy=True, continuous_actions=False))})"
                )
        if not self.capabilities.turn_based and env.is_multi_agent and env.spec.turn_based:
            raise ConfigError(
                f"{self.name} bootstraps each agent from the next env step, where on the "
                f"turn-taking env {env.name!r} that agent is not observing; use "
                f"{', '.join(algorithms_that(off_policy=True, turn_based=True))} (mixed "
                "team values) or an on-policy algorithm"
            )
        if not self.capabilities.multi_team and env.is_multi_agent:
            teams = env.layout.teams
            if len(teams) > 1:
                raise ConfigError(
                    f"{self.name} supports one team, and env {env.name!r} has teams "
                    f"{sorted(teams)}; on mixed or competitive envs use "
                    f"{', '.join(algorithms_that(multi_team=True, off_policy=False))}"
                )

    def rllib_config(
        self, settings: Any, env: EnvHandle, share_policy: str, seed: int | None
    ) -> AlgorithmConfig:
        """The RLlib config, carrying the (resolved) settings to every learner, env
        runner and callback; ``env`` passed :meth:`check_env` (``Algo.rllib_config``
        checks it before building the settings, so an unfit env is the first error)."""
        settings = gaussian_only_settings(self.resolve(settings, env), env)
        config = with_settings(self.build(settings, env, share_policy, seed), settings)
        if self.schedule is not None:
            config = with_schedule(config, settings, self.schedule)
        try:
            config = with_actor_options(
                config,
                self.name,
                feature_norm=getattr(settings, "feature_norm", False),
                std_bound=getattr(settings, "std_bound", None),
            )
        except ValueError as e:
            raise ConfigError(str(e)) from None
        if getattr(settings, "encoder", "mlp") == "cnn" and not getattr(
            settings, "builds_own_encoder", False
        ):
            config = with_grid_encoder_checked(config, self.name, settings, env)
        if env.is_multi_agent and env.layout.has_action_masks:
            try:
                config = with_masked_actors(config, self.name)
            except ValueError as e:
                raise ConfigError(f"{e}; env {env.name!r} has action masks") from None
            # RLlib's env pre-check steps with unmasked random actions, which envs with
            # illegal moves reject.
            config.environment(disable_env_checking=True)
        if env.is_multi_agent:
            # The package's runner: its episodes iterate their agents in sorted order (runs
            # reproduce from their seed), and a batched simulator is one env per runner.
            runner = config.env_runner_cls
            if not (isinstance(runner, type) and issubclass(runner, BatchedEnvRunner)):
                config.env_runners(env_runner_cls=BatchedEnvRunner)
        if env.is_multi_agent and env.spec.batched_creator is not None:
            # RLlib's pre-check would step one world of the batch alone.
            config.environment(disable_env_checking=True)
        if env.is_multi_agent and env.spec.turn_based:
            # An action completes at the agent's next turn: learn on whole episodes, and
            # not RLlib's complete-episode sampling, which drops the long ones.
            # Team replay's runner is one already.
            runner = config.env_runner_cls
            if not (isinstance(runner, type) and issubclass(runner, WholeEpisodeEnvRunner)):
                runner = WholeEpisodeEnvRunner
            config.env_runners(batch_mode=COMPLETE_EPISODES, env_runner_cls=runner)
        config = with_evaluation(config, settings)
        return (
            with_episode_end_callback(config, log_contract_breaches)
            if env.is_multi_agent
            else config
        )


ANY_ENV = Capabilities(multi_agent_only=False)
SEQUENTIAL = Capabilities(sequential=True)
EFX = {
    "capabilities": Capabilities(has_budget=True),
    "resolve": with_resolved_budget,
    "progress_columns": efx.PROGRESS_COLUMNS,
    "progress": efx.progress,
}
EFX_SEQUENTIAL = {**EFX, "capabilities": Capabilities(has_budget=True, sequential=True)}
SAFE = {
    "capabilities": Capabilities(needs_costs=True),
    "progress_columns": safe.PROGRESS_COLUMNS,
    "progress": safe.progress,
    "resolve": safe.with_teams,
}
TR = {"progress_columns": trust_region.PROGRESS_COLUMNS, "progress": trust_region.progress}
TR_SEQ = {"capabilities": SEQUENTIAL, **TR}


def efx_trust_region_progress(result: Mapping[str, Any]) -> dict[str, float]:
    return {**efx.progress(result), **trust_region.progress(result)}


EFX_TRUST_REGION = {
    **EFX_SEQUENTIAL,
    "progress_columns": efx.PROGRESS_COLUMNS + trust_region.PROGRESS_COLUMNS,
    "progress": efx_trust_region_progress,
}
JOINT_Q_CAPABILITIES = Capabilities(continuous_actions=False, off_policy=True)
DDPG_CAPABILITIES = Capabilities(discrete_actions=False, off_policy=True)
INDEPENDENT_REPLAY = {"turn_based": False}
TEAM_REPLAY = {
    "progress_columns": team_replay.PROGRESS_COLUMNS,
    "progress": team_replay.progress,
}
JOINT_Q = {"capabilities": JOINT_Q_CAPABILITIES, **TEAM_REPLAY}
DDPG = {"capabilities": DDPG_CAPABILITIES, **TEAM_REPLAY}
SOFT_AC_CAPABILITIES = Capabilities(off_policy=True)
SOFT_AC = {"capabilities": SOFT_AC_CAPABILITIES, **TEAM_REPLAY}
SOFT_AC_SEQUENTIAL = {
    **SOFT_AC,
    "capabilities": dataclasses.replace(SOFT_AC_CAPABILITIES, sequential=True),
}
SAC_CAPABILITIES = Capabilities(multi_agent_only=False, single_agent_only=True, off_policy=True)
# fmt: off
ALGORITHMS: dict[str, AlgoSpec] = {
    spec.name: spec
    for spec in (
        AlgoSpec("ippo", "IL", PPOSettings, ppo.build_ippo, ANY_ENV, schedule=PPO),
        AlgoSpec("mappo", "CC", MAPPOSettings, ppo.build_mappo, schedule=PPO),
        AlgoSpec("efx_mappo", "CC", efx.EFXSettings, efx.build_efx_mappo, schedule=PPO, **EFX),
        AlgoSpec("vdppo", "VD", VDPPOSettings, ppo.build_vdppo, schedule=PPO),
        AlgoSpec("efx_vdppo", "VD", efx.EFXVDSettings, efx.build_efx_vdppo, schedule=PPO, **EFX),
        AlgoSpec("ia2c", "IL", ppo.A2CSettings, ppo.build_ia2c, ANY_ENV, schedule=A2C),
        AlgoSpec("ipg", "IL", ppo.A2CSettings, ppo.build_ia2c, ANY_ENV, schedule=A2C),
        AlgoSpec("maa2c", "CC", ppo.MAA2CSettings, ppo.build_maa2c, schedule=A2C),
        AlgoSpec("vda2c", "VD", ppo.VDA2CSettings, ppo.build_vda2c, schedule=A2C),
        AlgoSpec("coma", "CC", coma.COMASettings, coma.build_coma,
                 Capabilities(continuous_actions=False), schedule=COMA),
        AlgoSpec("happo", "CC", CentralCriticSettings, happo.build_happo, SEQUENTIAL,
                 schedule=HAPPO),
        AlgoSpec("itrpo", "IL", trust_region.ITRPOSettings, trust_region.build_itrpo,
                 schedule=TRPO, **TR),
        AlgoSpec("matrpo", "CC", trust_region.MATRPOSettings, trust_region.build_matrpo,
                 schedule=TRPO, **TR),
        AlgoSpec("hatrpo", "CC", trust_region.MATRPOSettings, trust_region.build_hatrpo,
                 schedule=HATRPO, **TR_SEQ),
        AlgoSpec("efx_hatrpo", "CC", efx.EFXTrustRegionSettings, efx.build_efx_hatrpo,
                 schedule=HATRPO, **EFX_TRUST_REGION),
        AlgoSpec("efx_happo", "CC", efx.EFXSettings, efx.build_efx_happo, schedule=HAPPO,
                 **EFX_SEQUENTIAL),
        AlgoSpec("mappo_lag", "CC", safe.LagSettings, safe.build_mappo_lag, schedule=PPO, **SAFE),
        AlgoSpec("mappo_pid_lag", "CC", safe.PIDLagSettings, safe.build_mappo_pid_lag,
                 schedule=PPO, **SAFE),
        AlgoSpec("mappo_cup", "CC", safe.CUPSettings, safe.build_mappo_cup, schedule=CUP, **SAFE),
        AlgoSpec("mappo_focops", "CC", safe.FOCOPSSettings, safe.build_mappo_focops,
                 schedule=FOCOPS, **SAFE),
        AlgoSpec("sac_roer", "SA", roer.ROERSettings, roer.build_sac_roer, SAC_CAPABILITIES),
        AlgoSpec("isac_roer", "IL", roer.ROERSettings, roer.build_isac_roer,
                 Capabilities(off_policy=True)),
        AlgoSpec("iql", "IL", joint_q.JointQSettings, joint_q.build_iql, **{
            **JOINT_Q,
            "capabilities": dataclasses.replace(JOINT_Q_CAPABILITIES, **INDEPENDENT_REPLAY)}),
        AlgoSpec("vdn", "VD", joint_q.JointQSettings, joint_q.build_vdn, **JOINT_Q),
        AlgoSpec("qmix", "VD", joint_q.JointQSettings, joint_q.build_qmix, **JOINT_Q),
        AlgoSpec("iddpg", "IL", ddpg.DDPGSettings, ddpg.build_iddpg, **{
            **DDPG, "capabilities": dataclasses.replace(DDPG_CAPABILITIES, **INDEPENDENT_REPLAY)}),
        AlgoSpec("maddpg", "CC", ddpg.DDPGSettings, ddpg.build_maddpg, **DDPG),
        AlgoSpec("facmac", "VD", ddpg.FACMACSettings, ddpg.build_facmac, **DDPG),
        AlgoSpec("masac", "CC", masac.MASACSettings, masac.build_masac, **SOFT_AC),
        AlgoSpec("hasac", "CC", masac.MASACSettings, masac.build_hasac, **SOFT_AC_SEQUENTIAL),
    )
}
# fmt: on


def algorithms_that(**capabilities: bool) -> list[str]:
    """Registered names whose capabilities match, e.g. ``algorithms_that(has_budget=True)``."""
    for key in capabilities:
        if not hasattr(Capabilities(), key):
            raise ConfigError(f"unknown capability {key!r}")
    return [
        name
        for name, spec in ALGORITHMS.items()
        if all(getattr(spec.capabilities, k) == v for k, v in capabilities.items())
    ]


def progress_columns() -> tuple[ProgressColumn, ...]:
    """Every registered algorithm's progress columns, in registry order, once each."""
    seen: dict[str, ProgressColumn] = {}
    for spec in ALGORITHMS.values():
        for column in spec.progress_columns:
            seen.setdefault(column.name, column)
    return tuple(seen.values())


def get_algo_spec(name: str) -> AlgoSpec:
    if name in ALGORITHMS:
        return ALGORITHMS[name]
    close = difflib.get_close_matches(name, list(ALGORITHMS), n=1)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    raise ConfigError(f"unknown algorithm {name!r}.{hint} Available: {', '.join(ALGORITHMS)}")


def with_grid_encoder_checked(config, algorithm: str, settings: Any, env: EnvHandle):
    """``config`` with CNN actors (``policies.grid_actor``); ``ConfigError`` where the
    env's observations are not grids or an actor cannot take the encoder."""
    from marllib_ext.algos.encoders import agent_grid_shapes
    from marllib_ext.policies.grid_actor import with_grid_encoders

    agent_grid_shapes(env, list(env.layout.observation_spaces) if env.is_multi_agent else [])
    try:
        return with_grid_encoders(
            config,
            algorithm,
            conv_filters=settings.conv_filters,
            activation=settings.actor_activation,
            hiddens=settings.actor_hiddens,
        )
    except ValueError as e:
        raise ConfigError(str(e)) from None
