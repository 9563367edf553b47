"""Settings of the novelty signals: how observations are counted (``CountFields``, for
EFX's ``intrinsic_reward: count`` and the bonus), RND's networks and training
(``NoveltyFields``, and the module ``with_rnd_module`` adds), and a novelty bonus added
to the team reward (``NoveltyBonusFields``, ``mappo``'s and ``vdppo``'s
``intrinsic_bonus_coeff``)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import gymnasium as gym
import numpy as np
from ray.rllib.core.rl_module.multi_rl_module import MultiRLModuleSpec
from ray.rllib.core.rl_module.rl_module import RLModuleSpec

from marllib_ext.algos.config import CentralCriticSettings, Check, VDSettings
from marllib_ext.ops.novelty import BONUS_SIGNALS, COUNT_HASHES, COUNT_SCOPES
from marllib_ext.policies.rnd import (
    RND_AGENTS,
    RND_DIMS,
    RND_FEATURES,
    RND_HIDDENS,
    RND_INPUTS,
    RND_MODULE_ID,
    RND_SCOPE,
    RND_SEED,
    RND_TEAMS,
    RNDModule,
)
from marllib_ext.postprocessing.novelty_signals import rnd_input_widths


@dataclass(frozen=True)
class CountFields:
    """How the count signal (``novelty_signals.CountSignal``) counts observations:
    the agent's own or the team's joint one (``count_scope``), as exact rounded rows
    (``count_hash: exact``, ``count_decimals``) or SimHash codes (``simhash``,
    ``count_hash_bits``)."""

    count_scope: str = dataclasses.field(default="agent", kw_only=True)
    count_hash: str = dataclasses.field(default="exact", kw_only=True)
    count_hash_bits: int = dataclasses.field(default=32, kw_only=True)
    count_decimals: int = dataclasses.field(default=2, kw_only=True)

    def checks(self) -> list[Check]:
        return [
            (self.count_scope in COUNT_SCOPES, "count_scope", f"one of {COUNT_SCOPES}"),
            (self.count_hash in COUNT_HASHES, "count_hash", f"one of {COUNT_HASHES}"),
            (1 <= self.count_hash_bits <= 64, "count_hash_bits", "must be in [1, 64]"),
            (0 <= self.count_decimals <= 8, "count_decimals", "must be in [0, 8]"),
        ]


@dataclass(frozen=True)
class NoveltyFields(CountFields):
    """The count settings and RND's (``novelty_signals.RNDSignal``,
    ``policies.rnd``): the agent's own or the team's joint next observation
    (``rnd_scope``), the networks' layer widths (``rnd_hiddens``) and feature width
    (``rnd_features``), and the predictor's training per iteration: ``rnd_epochs``
    passes over the iteration's rows in minibatches of ``rnd_minibatch_size`` rows,
    with the learner's ``lr``."""

    rnd_scope: str = dataclasses.field(default="agent", kw_only=True)
    rnd_hiddens: list[int] = dataclasses.field(default_factory=lambda: [64, 64], kw_only=True)
    rnd_features: int = dataclasses.field(default=32, kw_only=True)
    rnd_epochs: int = dataclasses.field(default=4, kw_only=True)
    rnd_minibatch_size: int = dataclasses.field(default=1024, kw_only=True)

    def checks(self) -> list[Check]:
        return [
            (self.rnd_scope in COUNT_SCOPES, "rnd_scope", f"one of {COUNT_SCOPES}"),
            (all(int(h) >= 1 for h in self.rnd_hiddens), "rnd_hiddens", "widths must be >= 1"),
            (self.rnd_features >= 1, "rnd_features", "must be >= 1"),
            (self.rnd_epochs >= 1, "rnd_epochs", "must be >= 1"),
            (self.rnd_minibatch_size >= 1, "rnd_minibatch_size", "must be >= 1"),
        ]


@dataclass(frozen=True)
class NoveltyBonusFields(NoveltyFields):
    """A novelty bonus simply added to the team reward, ``r + intrinsic_bonus_coeff *
    r_int`` (0: off): the non-conservative counterpart of EFX's budget."""

    intrinsic_bonus_coeff: float = dataclasses.field(default=0.0, kw_only=True)
    intrinsic_bonus: str = dataclasses.field(default="count", kw_only=True)

    def checks(self) -> list[Check]:
        return [
            (self.intrinsic_bonus_coeff >= 0, "intrinsic_bonus_coeff", "must be >= 0"),
            (self.intrinsic_bonus in BONUS_SIGNALS, "intrinsic_bonus", f"one of {BONUS_SIGNALS}"),
        ]


@dataclass(frozen=True)
class MAPPOSettings(CentralCriticSettings, NoveltyBonusFields):
    """``mappo``: the joint-critic settings and an optional novelty bonus."""


@dataclass(frozen=True)
class VDPPOSettings(VDSettings, NoveltyBonusFields):
    """``vdppo``: the value-decomposition settings and an optional novelty bonus."""


def rnd_signal_name(settings) -> str | None:
    """The signal the run's RND module serves: ``rnd`` where EFX's budget or the novelty
    bonus uses it, else ``None`` (no module)."""
    if getattr(settings, "intrinsic_reward", None) == "rnd":
        return "rnd"
    bonus = getattr(settings, "intrinsic_bonus_coeff", 0.0) > 0
    return "rnd" if bonus and getattr(settings, "intrinsic_bonus", None) == "rnd" else None


def with_rnd_module(config, settings, env, seed: int | None, teams: list[list[str]]) -> None:
    """Adds RND's module (``policies.rnd``) to ``config``'s MultiRLModule where the run's
    signal is ``rnd``: one target/predictor pair per agent (``rnd_scope: agent``,
    agents in sorted order as the connectors hold them) or per team in ``teams``, on
    each agent's plain observation."""
    if rnd_signal_name(settings) is None:
        return
    layout = env.layout
    agents = sorted(layout.agents)
    dims = [gym.spaces.flatdim(layout.plain_observation_space(agent)) for agent in agents]
    team_indices = [[agents.index(agent) for agent in team] for team in teams]
    widths = rnd_input_widths(dims, team_indices, settings.rnd_scope)
    specs = dict(config.rl_module_spec.rl_module_specs)
    specs[RND_MODULE_ID] = RLModuleSpec(
        module_class=RNDModule,
        observation_space=gym.spaces.Box(-np.inf, np.inf, (max(widths.values()),), np.float32),
        action_space=layout.action_spaces[agents[0]],  # unused; RLModuleSpec requires one
        model_config={
            RND_INPUTS: widths,
            RND_HIDDENS: list(settings.rnd_hiddens),
            RND_FEATURES: settings.rnd_features,
            RND_SEED: seed,
            RND_AGENTS: agents,
            RND_DIMS: dims,
            RND_TEAMS: team_indices,
            RND_SCOPE: settings.rnd_scope,
        },
    )
    config.rl_module(rl_module_spec=MultiRLModuleSpec(rl_module_specs=specs))
