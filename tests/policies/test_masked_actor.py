"""Masked PPO actors: illegal logits replaced, RLlib's distribution never samples them."""

import numpy as np
import pytest
import torch
from gymnasium import spaces
from ray.rllib.core.columns import Columns
from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
from ray.rllib.core.rl_module.rl_module import RLModuleSpec

from marllib_ext.envs.adapter import masked_observation_space
from marllib_ext.ops.masks import MASKED_LOGIT
from marllib_ext.policies.budget_actor import BudgetTemperatureActor
from marllib_ext.policies.masked_actor import (
    MaskedBudgetTemperatureActor,
    MaskedPPOActor,
    masked_actor_class,
)
from marllib_ext.policies.q_agent import QAgentRLModule

N_ACTIONS = 5


def actor(module_class=MaskedPPOActor, **model_config):
    space = masked_observation_space(spaces.Box(-1.0, 1.0, (4,), np.float32), N_ACTIONS)
    return RLModuleSpec(
        module_class=module_class,
        observation_space=space,
        action_space=spaces.Discrete(N_ACTIONS),
        model_config=model_config or DefaultModelConfig(fcnet_hiddens=[16]),
    ).build()


def masked_batch(rows=64, seed=0):
    generator = torch.Generator().manual_seed(seed)
    mask = (torch.rand(rows, N_ACTIONS, generator=generator) < 0.5).float()
    mask[torch.arange(rows), torch.randint(0, N_ACTIONS, (rows,), generator=generator)] = 1.0
    obs = torch.rand(rows, 4, generator=generator) * 2 - 1
    return {Columns.OBS: {"observation": obs, "action_mask": mask}}, mask


def test_networks_see_the_plain_observation_and_the_module_keeps_the_masked_space():
    module = actor()
    assert module.encoder.encoder.net.mlp[0].in_features == 4  # shared actor/critic encoder
    assert "action_mask" in module.observation_space.spaces


@pytest.mark.parametrize("forward", ["forward_exploration", "forward_inference", "forward_train"])
def test_every_forward_masks_the_illegal_logits(forward):
    module = actor()
    batch, mask = masked_batch()
    logits = getattr(module, forward)(batch)[Columns.ACTION_DIST_INPUTS]
    assert (logits[mask == 0] == MASKED_LOGIT).all()
    assert (logits[mask == 1] > MASKED_LOGIT / 2).all()
    assert "action_mask" in batch[Columns.OBS]  # the caller's batch is left as it was


def test_sampling_the_module_never_gives_an_illegal_action_in_100k_draws():
    module = actor()
    batch, mask = masked_batch(rows=1000, seed=1)
    logits = module.forward_exploration(batch)[Columns.ACTION_DIST_INPUTS]
    dist = module.get_exploration_action_dist_cls().from_logits(logits)
    draws = torch.stack([dist.sample() for _ in range(100)], dim=1)  # (1000, 100)
    assert mask.gather(1, draws).min() == 1.0


def test_the_ppo_terms_stay_finite_through_the_mask():
    module = actor()
    batch, mask = masked_batch()
    actions = torch.multinomial(mask, 1).squeeze(-1)
    logits = module.forward_train(batch)[Columns.ACTION_DIST_INPUTS]
    dist = module.get_train_action_dist_cls().from_logits(logits)
    old = module.get_train_action_dist_cls().from_logits(logits.detach() + 0.1)
    loss = -(torch.exp(dist.logp(actions) - old.logp(actions))).mean() - dist.entropy().mean()
    loss = loss + dist.kl(old).mean()
    loss.backward()
    grads = [p.grad for p in module.parameters() if p.grad is not None]
    assert grads and all(torch.isfinite(g).all() for g in grads)
    assert torch.isfinite(module.compute_values(batch)).all()


def test_masked_variants_of_each_actor_class():
    from ray.rllib.algorithms.ppo.torch.default_ppo_torch_rl_module import (
        DefaultPPOTorchRLModule,
    )

    assert masked_actor_class(DefaultPPOTorchRLModule) is MaskedPPOActor
    assert masked_actor_class(BudgetTemperatureActor) is MaskedBudgetTemperatureActor
    assert masked_actor_class(QAgentRLModule) is QAgentRLModule  # masks itself
    with pytest.raises(ValueError, match="no action-masked variant"):
        masked_actor_class(torch.nn.Module)
    with pytest.raises(ValueError, match="needs observations with an action mask"):
        RLModuleSpec(
            module_class=MaskedPPOActor,
            observation_space=spaces.Box(-1.0, 1.0, (4,)),
            action_space=spaces.Discrete(N_ACTIONS),
        ).build()


def test_joint_q_agents_act_on_legal_actions_only():
    space = masked_observation_space(spaces.Box(-1.0, 1.0, (4,), np.float32), N_ACTIONS)
    module = RLModuleSpec(
        module_class=QAgentRLModule,
        observation_space=space,
        action_space=spaces.Discrete(N_ACTIONS),
        model_config={
            "hiddens": [16],
            "activation": "relu",
            "epsilon_start": 1.0,
            "epsilon_end": 1.0,
            "epsilon_timesteps": 1,
        },  # fmt: skip
    ).build()
    batch, mask = masked_batch(rows=1000, seed=2)
    greedy = module.forward_inference(batch)[Columns.ACTIONS]
    assert mask.gather(1, greedy[:, None]).min() == 1.0
    explored = torch.stack(
        [module.forward_exploration(batch, t=0)[Columns.ACTIONS] for _ in range(100)], dim=1
    )  # epsilon = 1: 10^5 uniform legal draws
    assert mask.gather(1, explored).min() == 1.0
    counts = torch.bincount(explored[mask.sum(-1) == N_ACTIONS].reshape(-1), minlength=5)
    assert counts.min() > 0  # rows with every action legal draw all of them
