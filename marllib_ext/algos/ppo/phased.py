"""The one update loop of the on-policy learners: the learner connector builds the
iteration's batch once, then the algorithm's declared schedule
(:mod:`marllib_ext.algos.ppo.schedule`) runs phase after phase on it."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from ray.rllib.algorithms.ppo.torch.ppo_torch_learner import PPOTorchLearner
from ray.rllib.core.columns import Columns
from ray.rllib.policy.sample_batch import MultiAgentBatch, SampleBatch
from ray.rllib.utils.annotations import override
from ray.rllib.utils.metrics import ALL_MODULES

from marllib_ext.algos.config import learner_share
from marllib_ext.algos.ppo.rnd_training import train_rnd
from marllib_ext.algos.ppo.schedule import (
    ACTORS,
    ALL,
    DRAWN,
    HAPPO_FACTOR,
    TOGETHER,
    Phase,
    Schedule,
    rllib_phase,
)
from marllib_ext.ops.happo import team_row_log_ratio
from marllib_ext.ops.minibatches import (
    cyclic_minibatch_rows,
    equal_pass_minibatch_sizes,
    minibatch_steps,
)
from marllib_ext.policies.initialization import HIDDEN_GAINS, orthogonal_init, set_initial_std
from marllib_ext.policies.joint_critic import is_critic_module
from marllib_ext.policies.rnd import RND_MODULE_ID
from marllib_ext.postprocessing.block_batch import TEAM_ROW
from marllib_ext.rllib_compat import (
    RestoresOptimizerStateUnshared,
    first_learners_array,
    learner_value,
    plain_module,
    settings_of,
    with_learner_value,
)
from marllib_ext.rllib_compat.data_parallel import data_parallel, max_over_learners
from marllib_ext.rllib_compat.env_runners import pause_cyclic_gc
from marllib_ext.rllib_compat.minibatches import (
    minibatch_units,
    module_batch,
    reorder,
    rows_of,
    units_per_minibatch,
    update_on_minibatches,
)
from marllib_ext.rollout.blocks import RolloutBlock
from marllib_ext.rollout.sampler import as_rollout_blocks

# Seconds the learner took to build its batch from rollout blocks.
BLOCK_BATCH_TIMER = "block_batch_timer"
# learner_config_dict entry that carries the algorithm's schedule.
SCHEDULE_KEY = "marllib_ext_schedule"
# Actor batch column: the mean of each module's factor M (TEAM_ROW: each actor row's
# index in its team's critic batch).
FACTOR_MEAN = "happo_factor_mean"


def with_schedule(config, settings: Any, schedule: Schedule):
    """``config`` carrying ``schedule``, with RLlib's ``lr``, ``num_epochs`` and
    ``minibatch_size`` read from the keys of its last SGD phase, and ``critic_lr`` (where
    set and different) as the joint critics' own ``lr`` (each learner's share
    of the minibatch; with several learners and whole-batch steps, RLlib's sharding
    still needs an int to count minibatches: the learner's batch share, unused)."""
    phase = rllib_phase(schedule)
    per_learner_batch = learner_share(settings.train_batch_size, settings.num_learners)
    minibatch_size = learner_share(getattr(settings, phase.minibatch_size), settings.num_learners)
    if minibatch_size is None and settings.num_learners > 1:
        minibatch_size = per_learner_batch
    lr = getattr(settings, phase.lr)
    config.training(
        lr=lr, num_epochs=getattr(settings, phase.epochs), minibatch_size=minibatch_size
    )
    critic_lr = getattr(settings, "critic_lr", None)
    if critic_lr is not None and critic_lr != lr:
        critics = [m for m in config.rl_module_spec.rl_module_specs if is_critic_module(m)]
        config.rl_module(
            algorithm_config_overrides_per_module={m: {"lr": critic_lr} for m in critics}
        )
    return with_learner_value(config, SCHEDULE_KEY, schedule)


class PhasedLearner(RestoresOptimizerStateUnshared, PPOTorchLearner):
    """Runs the schedule its config carries. A phase's step kind ``k`` is the method
    ``k_step(phase, module_batches, context)``; a family with a new kind of step adds
    that method, not an ``update`` override."""

    @override(PPOTorchLearner)
    def build(self) -> None:
        super().build()
        self.settings = settings_of(self.config)
        self.schedule: Schedule = learner_value(self.config, SCHEDULE_KEY)
        self.rllib_phase = rllib_phase(self.schedule)  # the phase RLlib's config is from
        for phase in self.schedule:
            if not callable(getattr(self, f"{phase.step}_step", None)):
                raise TypeError(f"{type(self).__name__} cannot run {phase.step!r} phases")
        self.initialize_modules()
        self._order_rng = np.random.default_rng(self.config.seed)
        self.last_order: list[str] = []
        # Actor module -> its team's joint critic (the HAPPO factor is per team).
        self.critic_of_actor: dict[str, str] = {}

    def initialize_modules(self) -> None:
        """The reference initialization where the settings ask for it (every learner
        draws the same weights from a generator seeded by the config's seed; the env
        runners get them with the first weight sync)."""
        settings = self.settings
        if not settings.orthogonal_init and settings.initial_std is None:
            return
        generator = torch.Generator().manual_seed(int(self.config.seed or 0))
        for module_id in sorted(self.module.keys()):
            if module_id == RND_MODULE_ID:
                continue  # RND's networks keep their seeded initialization
            module = plain_module(self.module, module_id)
            if settings.orthogonal_init:
                activation = (
                    settings.critic_activation
                    if is_critic_module(module_id)
                    else settings.actor_activation
                )
                orthogonal_init(
                    module,
                    hidden_gain=HIDDEN_GAINS[activation],
                    action_head_gain=settings.action_head_gain,
                    generator=generator,
                )
            if settings.initial_std is not None and not is_critic_module(module_id):
                set_initial_std(module, settings.initial_std, settings.std_bound)

    @override(PPOTorchLearner)
    def update(self, *, training_data=None, timesteps=None, **update_kwargs):
        context = PhaseContext(self.train_batch(training_data), timesteps, update_kwargs)
        result = None
        for index, phase in enumerate(self.schedule):
            context.last_phase = index == len(self.schedule) - 1
            result = self.run_phase(phase, context)
        # A schedule that ends without an RLlib update reduces the metrics itself.
        return result if result is not None else self.metrics.reduce()

    def train_batch(self, training_data) -> MultiAgentBatch:
        """The update's batch, always built from rollout blocks by ``block_batch``:
        what the runners handed over read as blocks (``rollout.sampler.as_rollout_blocks``:
        their blocks, or their episode chunks as blocks), so every sampler gives one
        batch. A ready batch passes through."""
        if getattr(training_data, "batch", None) is not None:
            return training_data.batch
        with pause_cyclic_gc():  # thousands of small episode chunks
            blocks, chunks = as_rollout_blocks(getattr(training_data, "episodes", None) or [])
        if RND_MODULE_ID in self.module.keys():  # noqa: SIM118 - MultiRLModule has no __iter__
            train_rnd(self, blocks)
        return self.block_batch(blocks, chunks)

    @classmethod
    def rollout_block_refusal(cls) -> str | None:
        """``None``: every phased learner builds its batch from rollout blocks, so a
        batched runner hands them over (``rollout.direct``)."""
        return None

    def block_batch(
        self, blocks: list[RolloutBlock], episodes: list | None = None
    ) -> MultiAgentBatch:
        """The train batch built from rollout blocks by the family's builder
        (``episodes``: the chunks the blocks were read from, where they were)."""
        raise NotImplementedError(f"{type(self).__name__} builds no batch from rollout blocks")

    def batch_of_columns(
        self, columns: dict[str, dict], blocks: list[RolloutBlock], started: float
    ) -> MultiAgentBatch:
        """``{module_id: {column: tensor}}`` built from ``blocks`` (or episode chunks) as
        the update's batch; logs the seconds since ``started`` (``perf_counter``) as
        ``block_batch_timer``."""
        batch = MultiAgentBatch(
            {module_id: module_batch(columns[module_id]) for module_id in sorted(columns)},
            env_steps=sum(len(block) for block in blocks),
        )
        self.metrics.log_value(
            (ALL_MODULES, BLOCK_BATCH_TIMER), time.perf_counter() - started, window=1
        )
        return batch

    def run_phase(self, phase: Phase, context: PhaseContext):
        """One phase: its modules together, or one after another in their order."""
        modules = self.phase_modules(phase, context.batch)
        if phase.order == TOGETHER:
            groups = [modules] if modules else []
        else:
            if phase.order == DRAWN:
                modules = self.draw_order(modules)
            groups = [[m] for m in modules]
        factors = TeamFactors(self, context.batch) if phase.weighting == HAPPO_FACTOR else None
        step = getattr(self, f"{phase.step}_step")
        result = None
        for index, group in enumerate(groups):
            context.last_part = context.last_phase and index == len(groups) - 1
            module_batches = {m: context.batch.policy_batches[m] for m in group}
            if factors is not None:
                module_batches = {m: factors.weighted(m, b) for m, b in module_batches.items()}
            result = step(phase, module_batches, context)
            if factors is not None:
                for module_id, module_batch in module_batches.items():
                    factors.record(module_id, module_batch)
        return result

    def phase_modules(self, phase: Phase, batch) -> list[str]:
        """The batch's modules the phase trains (the batch keeps them sorted). Without a
        joint critic, ``critics`` are the policy modules (their own value heads)."""
        ids = list(batch.policy_batches)
        critics = [m for m in ids if is_critic_module(m)]
        actors = [m for m in ids if not is_critic_module(m)]
        if phase.modules == ALL:
            return ids
        if phase.modules == ACTORS:
            return actors
        return critics or actors

    def draw_order(self, modules: list[str]) -> list[str]:
        """A fresh random order of ``modules`` (the same on every data-parallel
        learner), kept in ``last_order``."""
        order = first_learners_array(self._order_rng.permutation(len(modules)))
        self.last_order = [str(modules[i]) for i in order]
        return self.last_order

    # ---- step kinds -----------------------------------------------------------------
    def sgd_step(self, phase: Phase, module_batches: dict, context: PhaseContext):
        """The phase's epochs of minibatch SGD on these modules' rows, in the package's
        own loop (``update_on_minibatches``): each step's row indices come from
        ``ops.minibatches.cyclic_minibatch_rows`` (RLlib's cyclic minibatches on
        indices, shuffled by the same draws), and the step gathers just those rows; the
        batch is left in the order its last shuffle gave it, as RLlib's in-place
        shuffle leaves it."""
        batch = MultiAgentBatch(module_batches, context.batch.env_steps())
        module_batches = {
            m: rows for m, rows in module_batches.items() if self.should_module_be_updated(m, batch)
        }
        if not module_batches:
            return self.metrics.reduce() if context.last_part else None
        plan = self.minibatch_plan(phase, module_batches, context)
        orders: dict[str, np.ndarray] = {}
        steps = cyclic_minibatch_rows(
            {m: minibatch_units(rows) for m, rows in module_batches.items()},
            plan.sizes,
            num_epochs=plan.num_epochs,
            num_total_minibatches=plan.num_total_minibatches,
            shuffle=plan.shuffle,
            orders=orders,
        )
        result = update_on_minibatches(
            self,
            ({m: rows_of(module_batches[m], index) for m, index in step.items()} for step in steps),
            env_steps=batch.env_steps(),
            timesteps=context.timesteps,
            last=context.last_part,
        )
        for module_id, order in orders.items():
            reorder(module_batches[module_id], order)
        return result

    def minibatch_plan(
        self, phase: Phase, module_batches: dict, context: PhaseContext
    ) -> MinibatchPlan:
        """How the phase's SGD steps take their rows.

        - The phase RLlib's config is from: RLlib's ``num_epochs``, ``minibatch_size``,
          ``shuffle_batch_per_epoch`` and (data-parallel) ``num_total_minibatches`` as
          the algorithm hands them to ``update``; ``minibatch_size: null`` is one step
          on the whole batch per epoch (RLlib's rule: a minibatch of the batch's env
          steps).
        - Another SGD phase: its own epochs and minibatch size (null: the largest
          module batch), every data-parallel learner taking the most steps of any.
        - ``module_minibatches: equal_passes``: every module's minibatch is the same
          share of its own rows (``ops.minibatches.equal_pass_minibatch_sizes``), for
          the steps that give the largest batch its epochs."""
        settings, kwargs = self.settings, context.update_kwargs
        rows = {m: len(b) for m, b in module_batches.items()}
        num_total = 0
        configured = self.rllib_phase
        if (phase.epochs, phase.minibatch_size) == (configured.epochs, configured.minibatch_size):
            num_epochs = kwargs.get("num_epochs", 1)
            minibatch_size = (
                kwargs.get("minibatch_size") if getattr(settings, phase.minibatch_size) else None
            )
            num_total = kwargs.get("num_total_minibatches", 0) if minibatch_size else 0
        else:
            num_epochs = getattr(settings, phase.epochs)
            minibatch_size = learner_share(
                getattr(settings, phase.minibatch_size), settings.num_learners
            ) or max(rows.values())
            if data_parallel():
                num_total = max_over_learners(
                    minibatch_steps(num_epochs, max(rows.values()), minibatch_size)
                )
        shuffle = bool(kwargs.get("shuffle_batch_per_epoch")) and num_epochs > 1
        if minibatch_size is None:
            if num_epochs == 1:  # one step on each module's whole batch
                return MinibatchPlan(
                    {m: minibatch_units(b) for m, b in module_batches.items()}, 1, 0, False
                )
            sizes = dict.fromkeys(rows, context.batch.env_steps())
        elif settings.module_minibatches == "equal_passes":
            sizes = equal_pass_minibatch_sizes(rows, minibatch_size)
            num_total = num_total or minibatch_steps(num_epochs, max(rows.values()), minibatch_size)
        else:
            sizes = dict.fromkeys(rows, minibatch_size)
        units = {m: units_per_minibatch(module_batches[m], size) for m, size in sizes.items()}
        return MinibatchPlan(units, num_epochs, num_total, shuffle)


@dataclass(frozen=True)
class MinibatchPlan:
    """An SGD phase's minibatches: each module's rows (sequences) per step, the passes
    every module takes, or the exact number of steps when > 0, and whether each
    module's rows are shuffled after each pass."""

    sizes: dict[str, int]
    num_epochs: int
    num_total_minibatches: int
    shuffle: bool


class PhaseContext:
    """What the phases of one ``update`` share: the batch, RLlib's update arguments and
    whether the part being run is the iteration's last (its metrics are reduced)."""

    def __init__(self, batch, timesteps, update_kwargs: dict[str, Any]):
        self.batch = batch
        self.timesteps = timesteps
        self.update_kwargs = update_kwargs
        self.last_phase = False
        self.last_part = False


class TeamFactors:
    """HAPPO's factor ``M`` over one phase: per team row, the sum of the log ratios of
    the team's policies already updated in this phase."""

    def __init__(self, learner: PhasedLearner, batch):
        self.learner = learner
        critics = [m for m in batch.policy_batches if is_critic_module(m)]
        self.log_factors = {c: np.zeros(len(batch.policy_batches[c])) for c in critics}

    def weighted(self, module_id: str, rows) -> SampleBatch:
        """The module's rows with its factor ``M`` in the ``HAPPO_FACTOR`` column."""
        columns = dict(rows)
        team_rows = columns[TEAM_ROW].long().cpu().numpy()
        log_factor = self.log_factors[self.learner.critic_of_actor[module_id]][team_rows]
        columns[HAPPO_FACTOR] = torch.as_tensor(
            np.exp(log_factor), dtype=torch.float32, device=columns[TEAM_ROW].device
        )
        return module_batch(columns)

    def record(self, module_id: str, module_batch) -> None:
        """Adds the module's log ratios after its update to its team's factor."""
        critic = self.learner.critic_of_actor[module_id]
        self.log_factors[critic] += team_row_log_ratio(
            self.log_ratio(module_id, module_batch).ravel(),  # sequences: (N, L)
            module_batch[TEAM_ROW].long().cpu().numpy().ravel(),
            len(self.log_factors[critic]),
        )

    def log_ratio(self, module_id: str, module_batch) -> np.ndarray:
        """``(n_rows,)`` ``log pi_new - log pi_old`` of the taken actions after this
        policy's update (0 on rows outside the loss mask)."""
        module = plain_module(self.learner.module, module_id)
        with torch.no_grad():
            out = module.forward_train(dict(module_batch))
            dist = module.get_train_action_dist_cls().from_logits(out[Columns.ACTION_DIST_INPUTS])
            log_ratio = dist.logp(module_batch[Columns.ACTIONS]) - module_batch[Columns.ACTION_LOGP]
        if Columns.LOSS_MASK in module_batch:
            log_ratio = torch.where(module_batch[Columns.LOSS_MASK], log_ratio, 0.0)
        return log_ratio.double().cpu().numpy()
