"""The learner's half of RND (``intrinsic_reward: rnd`` or ``intrinsic_bonus: rnd``):
each iteration its predictor is trained on the rows the env runners scored, read
from the rollout blocks, before the algorithm's own update."""

from __future__ import annotations

import math

import numpy as np
import torch

from marllib_ext.policies.rnd import (
    ERRORS_PREFIX,
    RND_AGENTS,
    RND_DIMS,
    RND_MODULE_ID,
    RND_SCOPE,
    RND_TEAMS,
)
from marllib_ext.postprocessing.novelty_signals import (
    acted_rows,
    novelty_inputs,
    rnd_input_key,
)
from marllib_ext.rllib_compat import plain_module
from marllib_ext.rllib_compat.data_parallel import data_parallel, max_over_learners

# Learner metrics under the RND module: the predictor's mean error on the iteration's
# rows before its update and after it (the reference e_ref the runners score the
# next rows against), and the rows trained on.
RND_LOSS = "rnd_loss"
RND_REFERENCE = "rnd_reference"
RND_ROWS = "rnd_rows"


def rnd_training_rows(blocks, model_config: dict) -> dict[str, np.ndarray]:
    """``{input key: (N, d)}``: every block's next observations where the agents acted
    (each agent's plain observation: its first ``d`` columns, before EFX's z), as
    ``novelty_signals.novelty_inputs`` hands them to the runners' signal."""
    agents, dims = model_config[RND_AGENTS], model_config[RND_DIMS]
    teams, scope = model_config[RND_TEAMS], model_config[RND_SCOPE]
    parts: dict[str, list[np.ndarray]] = {}
    for block in blocks:
        columns = [block.agents.index(agent) for agent in agents]
        acted = block.alive[:, :, columns].reshape(-1, len(agents))
        observations = {
            agent: block.next_observations[agent].reshape(len(acted), -1)[:, :dim]
            for agent, dim in zip(agents, dims, strict=True)
        }
        rows = acted_rows(observations, acted, agents, dims)
        for kind, index, _, _, x in novelty_inputs(rows, acted, scope=scope, teams=teams):
            parts.setdefault(rnd_input_key(kind, index), []).append(x)
    return {key: np.concatenate(rows) for key, rows in parts.items()}


def train_rnd(learner, blocks) -> None:
    """One iteration of RND's predictor: the observation moments take the new rows,
    then ``rnd_epochs`` passes of Adam (the module's optimizer, the learner's ``lr``)
    on the mean error over minibatches of ``rnd_minibatch_size`` rows per input, then
    the reference error is measured on the same rows. Logs ``rnd_loss``,
    ``rnd_reference`` and ``rnd_rows`` under the module, so RLlib's weight sync
    sends the module to the env runners."""
    rnd = plain_module(learner.module, RND_MODULE_ID)
    settings = learner.settings
    inputs = rnd_training_rows(blocks, rnd.model_config)
    if not inputs:
        return
    for key, rows in inputs.items():
        rnd.pairs[key].add_moments(rows)
    tensors = {
        key: torch.as_tensor(rows, dtype=torch.float32, device=learner.device)
        for key, rows in inputs.items()
    }
    size = settings.rnd_minibatch_size
    steps = math.ceil(max(len(rows) for rows in tensors.values()) / size)
    if data_parallel():
        steps = max_over_learners(steps)
    optimizer = learner.get_optimizer(module_id=RND_MODULE_ID)
    generator = np.random.default_rng(learner.config.seed)
    before = _mean_errors(rnd, tensors)
    for _ in range(settings.rnd_epochs):
        orders = {key: generator.permutation(len(rows)) for key, rows in tensors.items()}
        for step in range(steps):
            batch = {
                key: rows[orders[key][(step * size + np.arange(size)) % len(rows)]]
                for key, rows in tensors.items()
            }
            out = learner.module[RND_MODULE_ID](batch)  # through DDP where wrapped
            loss = sum(out[ERRORS_PREFIX + key].mean() for key in batch)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
    after = _mean_errors(rnd, tensors)
    rnd.reference.fill_(after)
    learner.metrics.log_dict(
        {RND_LOSS: before, RND_REFERENCE: after, RND_ROWS: sum(map(len, tensors.values()))},
        key=RND_MODULE_ID,
        window=1,
    )


def _mean_errors(rnd, tensors: dict[str, torch.Tensor]) -> float:
    """The mean error over every row of every input."""
    with torch.no_grad():
        errors = [rnd.pairs[key].errors(rows) for key, rows in tensors.items()]
    return float(torch.cat(errors).double().mean())
