"""``joint_critic_block_batch`` on a hand-made block with units that die and action
masks, against a slow per-world reference built on ``team_gae``."""

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from ray.rllib.core.columns import Columns

from marllib_ext.ops import standardize_valid, team_gae
from marllib_ext.policies.joint_critic import STATE
from marllib_ext.postprocessing.block_batch import joint_critic_block_batch
from marllib_ext.postprocessing.joint_advantage import JointAdvantageConnector
from marllib_ext.postprocessing.own_value_batch import own_value_block_batch
from marllib_ext.rollout.blocks import RolloutBlock

SETTINGS = SimpleNamespace(gamma=0.9, lambda_=0.8, value_clip=None)
T, B, AGENTS = 6, 3, ["a", "b", "c"]
MODULES = {"a": "red", "b": "red", "c": "blue"}


class SumCritic:
    """V(s) = sum of the state's entries."""

    def compute_values(self, batch):
        return batch[STATE].sum(-1)

    def unwrapped(self):
        return self


def team_batch(blocks, actor_module_ids=None, connector_class=JointAdvantageConnector):
    """``joint_critic_block_batch`` of ``SumCritic`` as the team's joint critic."""
    connector = connector_class(
        settings=SETTINGS, critic_module_id="joint_critic", actor_module_ids=actor_module_ids
    )
    return joint_critic_block_batch(
        blocks, connector=connector, rl_module={"joint_critic": SumCritic()}, device="cpu"
    )


def make_block(seed=0, masked=True):
    rng = np.random.default_rng(seed)
    alive = np.ones((T, B, 3), bool)
    alive[3:, 0, 1] = False  # agent b of world 0 dies at step 2 (absent from step 3)
    died = np.zeros((T, B, 3), bool)
    died[2, 0, 1] = True
    terminated = np.zeros((T, B), bool)
    truncated = np.zeros((T, B), bool)
    terminated[2, 1] = True  # world 1's episode ends and it restarts in place
    truncated[4, 2] = True
    observations = {a: rng.normal(size=(T, B, 4)).astype(np.float32) for a in AGENTS}
    return RolloutBlock(
        agents=AGENTS,
        module_of=MODULES,
        observations=observations,
        action_masks={a: np.ones((T, B, 5), np.float32) for a in AGENTS} if masked else None,
        actions={a: rng.integers(0, 5, size=(T, B)) for a in AGENTS},
        outputs={
            a: {Columns.ACTION_LOGP: rng.normal(size=(T, B)).astype(np.float32)} for a in AGENTS
        },  # fmt: skip
        states=rng.normal(size=(T, B, 2)).astype(np.float32),
        next_states=rng.normal(size=(T, B, 2)).astype(np.float32),
        next_observations={a: rng.normal(size=(T, B, 4)).astype(np.float32) for a in AGENTS},
        next_action_masks=None,
        rewards=rng.normal(size=(T, B, 3)),
        terminated=terminated,
        truncated=truncated,
        alive=alive,
        died=died,
    )


def reference(block):
    """Per world: team_gae on the summed rewards of the present agents, then
    standardization over every (step, world)."""
    values = block.states.sum(-1).astype(np.float64)
    next_values = block.next_states.sum(-1).astype(np.float64)
    rewards = np.where(block.alive, block.rewards, 0.0).sum(-1)
    advantages, targets = np.zeros((T, B)), np.zeros((T, B))
    for w in range(B):
        advantages[:, w], targets[:, w] = team_gae(
            rewards[:, w], values[:, w], next_values[:, w], block.terminated[:, w],
            block.truncated[:, w], gamma=SETTINGS.gamma, lambda_=SETTINGS.lambda_,
        )  # fmt: skip
    standardized = standardize_valid(advantages.ravel(), np.ones(T * B, bool)).reshape(T, B)
    return standardized, targets


def test_rows_match_the_per_world_reference():
    block = make_block()
    batch = team_batch([block])
    advantages, targets = reference(block)
    assert sorted(batch) == ["blue", "joint_critic", "red"]
    # red holds, world by world, a's steps then b's (b without its 3 dead steps); blue c's.
    red = batch["red"]
    assert len(red[Columns.ACTIONS]) == 2 * T * B - 3

    def world_by_world(per_agent):
        """``{agent index: (T, B) values}`` as red's rows: world, agent, step."""
        return np.concatenate(
            [
                values[:, w][block.alive[:, w, i]]
                for w in range(B)
                for i, values in sorted(per_agent.items())
            ]
        )

    np.testing.assert_allclose(
        red[Columns.ADVANTAGES].numpy(),
        world_by_world({0: advantages, 1: advantages}),
        rtol=1e-5, atol=1e-6,
    )  # fmt: skip
    np.testing.assert_allclose(
        red[Columns.VALUE_TARGETS].numpy(),
        world_by_world({0: targets, 1: targets}),
        rtol=1e-5, atol=1e-5,
    )  # fmt: skip
    obs = red[Columns.OBS]
    assert set(obs) == {"observation", "action_mask"}
    np.testing.assert_array_equal(
        obs["observation"].numpy(),
        np.concatenate(
            [
                block.observations[a][:, w][block.alive[:, w, i]]
                for w in range(B)
                for i, a in enumerate(["a", "b"])
            ]
        ),
    )
    np.testing.assert_array_equal(
        red[Columns.ACTION_LOGP].numpy(),
        world_by_world(
            {i: block.outputs[a][Columns.ACTION_LOGP] for i, a in enumerate(["a", "b"])}
        ),
    )
    assert red[Columns.LOSS_MASK].all()
    critic = batch["joint_critic"]  # world by world too
    assert critic[STATE].shape == (T * B, 2)
    np.testing.assert_allclose(
        critic[Columns.VALUE_TARGETS].numpy(), targets.T.ravel(), rtol=1e-5, atol=1e-5
    )
    np.testing.assert_array_equal(critic[STATE].numpy(), block.states.swapaxes(0, 1).reshape(-1, 2))


def test_two_blocks_standardize_together():
    blocks = [make_block(0, masked=False), make_block(1, masked=False)]
    batch = team_batch(blocks, actor_module_ids=["blue"])
    assert sorted(batch) == ["blue", "joint_critic"]  # the team of blue's agents only
    advantages = batch["blue"][Columns.ADVANTAGES].numpy()
    assert advantages.mean() == pytest.approx(0.0, abs=1e-5)
    assert advantages.std() == pytest.approx(1.0, abs=1e-4)
    assert isinstance(batch["blue"][Columns.OBS], torch.Tensor)


def test_a_nan_reward_names_the_module_and_agent():
    block = make_block()
    block.rewards[1, 2, 2] = np.nan
    with pytest.raises(ValueError, match="module 'blue'.*agent 'c'.*world 2, step 1"):
        team_batch([block])


class ObsSumValues:
    """A module whose V(o) is the sum of the observation's entries."""

    def compute_values(self, batch):
        obs = batch[Columns.OBS]
        obs = obs["observation"] if isinstance(obs, dict) else obs
        return obs.sum(-1)


def test_own_value_rows_match_per_agent_gae():
    """``ippo``: per agent, GAE on its own reward and V(o); agent b's death at step 2
    ends its GAE there (no bootstrap), as a terminated episode does."""
    block = make_block()
    out = own_value_block_batch(
        [block], module=ObsSumValues(), module_id="red", settings=SETTINGS, device="cpu"
    )
    raw_targets, raw_advantages = {}, {}  # (world, agent) -> the agent's steps there
    for i, agent in enumerate(["a", "b"]):
        values = block.observations[agent].sum(-1).astype(np.float64)
        next_values = block.next_observations[agent].sum(-1).astype(np.float64)
        rewards = np.where(block.alive[:, :, i], block.rewards[:, :, i], 0.0)
        advantages, targets = np.zeros((T, B)), np.zeros((T, B))
        for w in range(B):
            advantages[:, w], targets[:, w] = team_gae(
                rewards[:, w], values[:, w], next_values[:, w],
                block.terminated[:, w] | block.died[:, w, i], block.truncated[:, w],
                gamma=SETTINGS.gamma, lambda_=SETTINGS.lambda_,
            )  # fmt: skip
        for w in range(B):
            present = block.alive[:, w, i]
            raw_targets[(w, i)] = targets[:, w][present]
            raw_advantages[(w, i)] = advantages[:, w][present]
    # rows world by world, each world's agents' steps together
    targets = np.concatenate([raw_targets[key] for key in sorted(raw_targets)])
    advantages = np.concatenate([raw_advantages[key] for key in sorted(raw_advantages)])
    np.testing.assert_allclose(out[Columns.VALUE_TARGETS].numpy(), targets, rtol=1e-5, atol=1e-5)
    standardized = (advantages - advantages.mean()) / advantages.std()
    np.testing.assert_allclose(out[Columns.ADVANTAGES].numpy(), standardized, rtol=1e-4, atol=1e-4)
    assert own_value_block_batch(
        [block], module=ObsSumValues(), module_id="green", settings=SETTINGS, device="cpu"
    ) is None  # fmt: skip
    block.rewards[4, 0, 0] = np.inf
    with pytest.raises(ValueError, match="module 'red'.*agent 'a'.*world 0, step 4"):
        own_value_block_batch(
            [block], module=ObsSumValues(), module_id="red", settings=SETTINGS, device="cpu"
        )
