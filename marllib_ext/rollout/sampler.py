"""How an env runner samples, decided once when its env and module exist
(``choose_sampler``) and frozen in a ``SamplerChoice``:

- ``rollout blocks``: through ``rollout.ArrayRollout``, one ``RolloutBlock`` per call;
- ``episode chunks built from arrays``: through ``ArrayRollout``, as RLlib episode chunks
  (a callback or learner reads episode objects);
- ``RLlib's per-world episodes``: RLlib's own loop (``array_rollout_refusal`` says why
  the arrays are refused: the env must be an ``ArrayWorld`` and the pipeline RLlib's
  default one, or one whose added env-to-module connectors have an array form,
  ``rollout.extensions``).

The ``sampler`` setting (``with_sampler``; ``auto`` by default) asks for a slower path
than the env and pipeline allow, e.g. to compare paths; it never forces a faster one.
Whatever a runner hands over, a learner reads it through ``as_rollout_blocks``."""

from __future__ import annotations

from dataclasses import dataclass

from ray.rllib.algorithms.algorithm_config import AlgorithmConfig

from marllib_ext.envs.adapter import has_action_mask
from marllib_ext.envs.agent_inputs import AgentInputs, AgentInputsWorld
from marllib_ext.errors import ConfigError
from marllib_ext.rllib_compat import env_runner_callbacks, env_to_module
from marllib_ext.rllib_compat.connectors import added_pieces
from marllib_ext.rllib_compat.env_runners import custom_connectors, runner_callbacks, runner_seed
from marllib_ext.rllib_compat.settings import with_learner_value
from marllib_ext.rollout.blocks import RolloutBlock
from marllib_ext.rollout.direct import rollout_block_refusal
from marllib_ext.rollout.episode_blocks import blocks_of_chunks
from marllib_ext.rollout.extensions import has_array_form

SAMPLER_KEY = "sampler"  # learner_config_dict entry: the asked-for sampler
AUTO, EPISODE_CHUNKS, PER_WORLD = "auto", "episode_chunks", "per_world"
SAMPLERS = (AUTO, EPISODE_CHUNKS, PER_WORLD)

BLOCKS = "rollout blocks"
CHUNKS_FROM_ARRAYS = "episode chunks built from arrays"
PER_WORLD_EPISODES = "RLlib's per-world episodes"


@dataclass(frozen=True)
class SamplerChoice:
    """How a runner samples: ``kind`` (``BLOCKS``, ``CHUNKS_FROM_ARRAYS`` or
    ``PER_WORLD_EPISODES``) and why a cheaper kind was not taken (``None``: none was
    refused)."""

    kind: str
    reason: str | None = None

    @property
    def uses_arrays(self) -> bool:
        """It samples through ``rollout.ArrayRollout``."""
        return self.kind != PER_WORLD_EPISODES

    @property
    def hands_blocks(self) -> bool:
        return self.kind == BLOCKS

    def description(self) -> str:
        """``sampling: <kind>``, with the reason in parentheses where there is one."""
        return f"sampling: {self.kind}" + ("" if self.reason is None else f" ({self.reason})")


def with_sampler(config: AlgorithmConfig, sampler: str) -> AlgorithmConfig:
    """``config`` whose runners sample as ``sampler`` asks (one of ``SAMPLERS``)."""
    if sampler not in SAMPLERS:
        raise ConfigError(f"sampler must be one of {SAMPLERS}, got {sampler!r}")
    return with_learner_value(config, SAMPLER_KEY, sampler)


def choose_sampler(env_runner) -> SamplerChoice:
    """The one decision of how ``env_runner`` samples (see the module's docstring)."""
    asked = (env_runner.config.learner_config_dict or {}).get(SAMPLER_KEY, AUTO)
    if asked == PER_WORLD:
        return SamplerChoice(PER_WORLD_EPISODES, f"the {SAMPLER_KEY} setting is {PER_WORLD!r}")
    refusal = array_rollout_refusal(env_runner)
    if refusal is not None:
        return SamplerChoice(PER_WORLD_EPISODES, refusal)
    if asked == EPISODE_CHUNKS:
        return SamplerChoice(CHUNKS_FROM_ARRAYS, f"the {SAMPLER_KEY} setting is {asked!r}")
    blocks_refusal = rollout_block_refusal(env_runner)
    if blocks_refusal is not None:
        return SamplerChoice(CHUNKS_FROM_ARRAYS, blocks_refusal)
    return SamplerChoice(BLOCKS)


def as_rollout_blocks(samples: list) -> tuple[list[RolloutBlock], list | None]:
    """``(blocks, chunks)`` of what runners handed a learner: their rollout blocks
    (``chunks`` ``None``), or their episode chunks read as blocks
    (``episode_blocks.blocks_of_chunks``), so that every learner batch is built from
    blocks whichever sampler a runner chose."""
    blocks = [sample for sample in samples if isinstance(sample, RolloutBlock)]
    if not blocks:
        return blocks_of_chunks(samples), samples
    if len(blocks) != len(samples):
        raise TypeError("a learner update got rollout blocks mixed with episode chunks")
    return blocks, None


# Per-step episode callbacks need an episode object at every step, which this path
# builds only at the end of a call.
PER_STEP_CALLBACKS = ("on_episode_created", "on_episode_start", "on_episode_step")


def array_rollout_refusal(env_runner) -> str | None:
    """Why ``env_runner`` samples through RLlib's per-world path (``None``: it can take
    the batched one)."""
    if getattr(env_runner, "module", None) is None:
        return "the runner has no module (it does not sample)"
    env = env_runner.env
    world = getattr(env, "world", None)
    if world is None or not hasattr(world, "step_arrays"):
        return "the env is not a batched simulator with an array interface"
    config = env_runner.config
    # A runner that assembles team episodes from the arrays itself (team replay).
    team_episodes = getattr(env_runner, "assembles_team_episodes", False)
    if config.batch_mode != "truncate_episodes" and not team_episodes:
        return "whole episodes are joined from RLlib's own chunks"
    _, module_to_env = custom_connectors(config)
    added = added_pieces(env_to_module(env_runner))
    blocks_refusal = None
    without_array_form = [type(piece).__name__ for piece in added if not has_array_form(piece)]
    if without_array_form:
        return f"env-to-module connectors without an array form: {without_array_form}"
    if added:
        # Their array forms write nothing into episodes (e.g. EFX's z_0 in custom_data).
        blocks_refusal = rollout_block_refusal(env_runner)
        if blocks_refusal is not None:
            return f"env-to-module connectors run on rollout blocks only ({blocks_refusal})"
    if module_to_env is not None:
        return "the algorithm adds module-to-env connectors"
    adapter = env.envs[0].unwrapped
    if _unwrapped(adapter.par_env, world) is not world.slots[0]:
        return "an env wrapper (e.g. time_feature) changes the observations"
    if adapter.state_source == "env" and not getattr(world, "provides_state", False):
        return "state_source 'env' and the simulator's arrays carry no state"
    masked = any(has_action_mask(s) for s in adapter.observation_space.spaces.values())
    if masked and not getattr(world, "provides_action_masks", False):
        return "the env has action masks and the simulator's arrays carry none"
    # Recurrent modules' states are carried in the arrays and kept in the blocks; the
    # episode chunks built from arrays carry none.
    if not team_episodes and any(module.is_stateful() for module in env_runner.module.values()):
        if blocks_refusal is None:
            blocks_refusal = rollout_block_refusal(env_runner)
        if blocks_refusal is not None:
            return f"a module is recurrent and the runner hands no blocks ({blocks_refusal})"
    for name in PER_STEP_CALLBACKS:
        callbacks = runner_callbacks(config, env_runner_callbacks(env_runner), name)
        if callbacks:
            return f"an {name} callback ({callbacks[0]})"
    # Last: copies of a plain env probe a reset and a step to answer; infos the arrays
    # drop matter only where the runner hands episode chunks.
    world_refusal = getattr(world, "refusal", None)
    if world_refusal is None:
        return None
    if blocks_refusal is None:
        blocks_refusal = rollout_block_refusal(env_runner)
    return world_refusal(runner_seed(env_runner), infos_read=blocks_refusal is not None)


def _unwrapped(par_env, world):
    """``par_env`` without the wrapper whose array form ``world`` applies (the agent's id
    and last action in its input)."""
    if isinstance(par_env, AgentInputs) and isinstance(world, AgentInputsWorld):
        same = (par_env.with_id, par_env.with_action) == (world.with_id, world.with_action)
        return par_env.env if same else par_env
    return par_env
