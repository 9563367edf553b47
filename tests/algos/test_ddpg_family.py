"""iddpg / maddpg / facmac on RLlib: one iteration each, critic targets against a
step-by-step reference, where the actors' gradients flow, Polyak targets, ROER,
teams, refusals."""

import dataclasses

import numpy as np
import pytest
import torch

from marllib_ext import algos, make_env
from marllib_ext.errors import ConfigError
from marllib_ext.ops.joint_q import team_sum
from marllib_ext.policies.ddpg import critic_module_id
from marllib_ext.policies.q_agent import target_module_id

SMALL = {
    "hyperparam_source": "mpe",
    "batch_episode": 4,
    "learning_starts": 2,
    "num_envs_per_env_runner": 2,
    "actor_hiddens": [16],
    "critic_hiddens": [16],
    "mixer_embed_dim": 8,
    "hypernet_embed_dim": 8,
}


def continuous_spread(**args):
    return make_env("mpe:simple_spread", continuous_actions=True, max_cycles=10, **args)


def build(name, env=None, share_policy="all", **overrides):
    config = algos.get(name, **{**SMALL, **overrides}).rllib_config(
        env or continuous_spread(), share_policy=share_policy, seed=0
    )
    return config.build_algo()


def learner_batch(algo, size=32):
    sampled = algo.store.sample_transitions(size)
    return sampled, {k: torch.as_tensor(v) for k, v in sampled.columns().items()}


def clear_grads(learner):
    """The last update leaves its gradients on the parameters."""
    for module in learner.module.values():
        for p in module.parameters():
            p.grad = None


def columns_at_step(columns):
    return (
        columns["obs"][:, 0],
        columns["obs"][:, 1],
        columns["state"][:, 0],
        columns["state"][:, 1],
        columns["actions"][:, 0].float(),
        columns["rewards"][:, 0],
        columns["terminated"][:, 0],
    )


@pytest.mark.parametrize("name", ["iddpg", "maddpg", "facmac"])
def test_one_iteration_trains_and_reports_progress(ray_session, name):
    algo = build(name)
    try:
        for _ in range(2):
            result = algo.train()
        row = algos.get(name).spec.progress(result)
        assert row["replay_buffer_episodes"] == 4.0 and row["replay_exploration"] == 0.1
        assert np.isfinite(row["replay_td_error"]) and np.isfinite(row["replay_q"])
        losses = result["learners"]["ddpg_team"]
        assert np.isfinite(losses["critic_loss"]) and np.isfinite(losses["actor_loss"])
    finally:
        algo.stop()


def test_maddpg_targets_and_own_action_gradients(ray_session):
    """Critic target y = r_team + gamma (1 - d) Q'_i(s', mu'(o')) written out per sample;
    actor i's objective moves only actor i's weights and no critic weight."""
    algo = build("maddpg", share_policy="individual")
    try:
        algo.train()
        learner = algo.learner_group._learner
        _, columns = learner_batch(algo)
        obs, next_obs, state, next_state, actions, rewards, done = columns_at_step(columns)
        agents = learner.agents
        policy_actions = torch.stack(
            [learner.module[a].actions(obs[:, i]) for i, a in enumerate(agents)], dim=1
        )
        next_actions = torch.stack(
            [
                learner.module[target_module_id(a)].actions(next_obs[:, i])
                for i, a in enumerate(agents)
            ],
            dim=1,
        ).detach()
        (values, targets), objective, _ = learner._central(
            [0, 1, 2], state, next_state, actions, policy_actions, next_actions, rewards, done
        )
        gamma = learner.settings.gamma
        for b in range(8):
            for i, agent in enumerate(agents):
                critic = learner.module[critic_module_id(agent)]
                x = torch.cat([next_state[b], next_actions[b].flatten()])
                y = rewards[b].sum() + gamma * (1 - done[b]) * critic.target_net(x)[0]
                assert targets[b, 0, i].item() == pytest.approx(y.item(), rel=1e-5, abs=1e-6)
        clear_grads(learner)
        objective[:, 1].sum().backward()
        for i, agent in enumerate(agents):
            grads = [p.grad for p in learner.module[agent].parameters()]
            moved = any(g is not None and g.abs().sum() > 0 for g in grads)
            assert moved == (i == 1), agent
            critic_grads = [p.grad for p in learner.module[critic_module_id(agent)].parameters()]
            assert all(g is None for g in critic_grads)
    finally:
        algo.stop()


def test_facmac_actors_all_move_through_the_mixed_critic(ray_session):
    algo = build("facmac", share_policy="individual", twin_q=False)
    try:
        algo.train()
        learner = algo.learner_group._learner
        _, columns = learner_batch(algo)
        obs, next_obs, state, next_state, actions, rewards, done = columns_at_step(columns)
        agents = learner.agents
        policy_actions = torch.stack(
            [learner.module[a].actions(obs[:, i]) for i, a in enumerate(agents)], dim=1
        )
        next_actions = torch.stack(
            [
                learner.module[target_module_id(a)].actions(next_obs[:, i])
                for i, a in enumerate(agents)
            ],
            dim=1,
        ).detach()
        (q_tot, targets), objective, _, _ = learner._mixed(
            "ddpg_team",
            [0, 1, 2],
            obs,
            next_obs,
            state,
            next_state,
            actions,
            policy_actions,
            next_actions,
            rewards,
            done,
        )
        mixer = learner.module["ddpg_team"]
        # Target: r_team + gamma (1 - d) mixer'(Q'_i(o'_i, mu'_i(o'_i)); s')
        next_q = torch.stack(
            [
                learner.module[critic_module_id(a)].target_net(
                    torch.cat([next_obs[:, i], next_actions[:, i]], -1)
                )[:, 0]
                for i, a in enumerate(agents)
            ],
            -1,
        )
        expected = (
            team_sum(rewards, [0, 1, 2])
            + learner.settings.gamma
            * (1 - done)
            * (mixer.mix(next_q[:, None], next_state[:, None], target=True)[:, 0])
        )
        torch.testing.assert_close(targets[:, 0], expected.detach())
        clear_grads(learner)
        objective.sum().backward()
        for agent in agents:
            assert any(
                p.grad is not None and p.grad.abs().sum() > 0
                for p in learner.module[agent].parameters()
            ), agent
            assert all(p.grad is None for p in learner.module[critic_module_id(agent)].parameters())
        assert all(p.grad is None for p in mixer.parameters())
    finally:
        algo.stop()


def test_targets_follow_by_polyak_averaging(ray_session):
    algo = build("iddpg", tau=0.5, learning_starts=100)
    try:
        algo.train()
        learner = algo.learner_group._learner
        actor = learner.module["shared"]
        target = learner.module[target_module_id("shared")]
        with torch.no_grad():
            actor.net[0].weight.add_(1.0)
        before = target.net[0].weight.clone()
        learner.after_gradient_based_update(timesteps={})
        torch.testing.assert_close(target.net[0].weight, 0.5 * before + 0.5 * actor.net[0].weight)
    finally:
        algo.stop()


def test_reward_standardization_is_over_the_replayed_batch(ray_session):
    """With ``reward_standardize`` the loss equals the plain loss on rewards standardized
    by hand over every agent and sample of the batch."""
    algo = build("iddpg", reward_standardize=True)
    try:
        algo.train()
        learner = algo.learner_group._learner
        _, columns = learner_batch(algo)
        standardized = learner.compute_losses(fwd_out=None, batch={"ddpg_team": columns})
        rewards = columns["rewards"][:, 0].double()
        by_hand = dict(columns, rewards=columns["rewards"].clone())
        by_hand["rewards"][:, 0] = (
            (rewards - rewards.mean()) / (rewards.std(unbiased=False) + 1e-5)
        ).float()
        learner.settings = dataclasses.replace(learner.settings, reward_standardize=False)
        reference = learner.compute_losses(fwd_out=None, batch={"ddpg_team": by_hand})
        raw = learner.compute_losses(fwd_out=None, batch={"ddpg_team": columns})
        assert standardized["ddpg_team"].item() == pytest.approx(
            reference["ddpg_team"].item(), rel=1e-4
        )
        assert raw["ddpg_team"].item() != pytest.approx(standardized["ddpg_team"].item(), rel=1e-3)
    finally:
        algo.stop()


def test_roer_priorities_on_maddpg(ray_session):
    algo = build("maddpg", per_type="JS")
    try:
        for _ in range(3):
            algo.train()
        priorities = algo.store.arrays["priority"][algo.store.valid_steps()]
        assert len(set(np.round(priorities, 6).tolist())) > 1
    finally:
        algo.stop()


def test_two_teams_get_one_team_module_each(ray_session):
    env = make_env("mpe:simple_adversary", continuous_actions=True, max_cycles=10)
    algo = build("maddpg", env=env, share_policy="group")
    try:
        result = algo.train()
        teams = [mid for mid in result["learners"] if str(mid).startswith("ddpg_team_")]
        assert len(teams) == 2
    finally:
        algo.stop()


@pytest.mark.parametrize("name", ["iddpg", "maddpg", "facmac"])
def test_discrete_actions_are_refused_before_anything_starts(name):
    with pytest.raises(ConfigError, match="continuous"):
        algos.get(name).rllib_config(make_env("mpe:simple_spread"))


def test_facmac_twin_critics_bootstrap_on_the_smaller_mixed_target(ray_session):
    """With ``twin_q`` the target is r_team + gamma (1 - d) min(mixer'(Q'_i), twin
    mixer'(twin Q'_i)), written out here from the target networks, and the critic loss
    is the sum of both mixed critics' squared errors."""
    algo = build("facmac", twin_q=True)
    try:
        algo.train()
        learner = algo.learner_group._learner
        _, columns = learner_batch(algo)
        obs, next_obs, state, next_state, actions, rewards, done = columns_at_step(columns)
        agents = learner.agents
        critic = learner.module[critic_module_id("shared")]
        target_actor = learner.module[target_module_id("shared")]
        next_actions = torch.stack(
            [target_actor.actions(next_obs[:, i]) for i in range(len(agents))], 1
        ).detach()
        policy_actions = torch.stack(
            [learner.module["shared"].actions(obs[:, i]) for i in range(len(agents))], 1
        )
        mixed_inputs = (
            "ddpg_team",
            [0, 1, 2],
            obs,
            next_obs,
            state,
            next_state,
            actions,
            policy_actions,
            next_actions,
            rewards,
            done,
        )
        (values, targets), _, td, q_tot = learner._mixed(*mixed_inputs)
        mixer = learner.module["ddpg_team"]
        gamma = learner.settings.gamma
        taken = [torch.cat([obs[:, i], actions[:, i]], -1) for i in range(3)]
        following = [torch.cat([next_obs[:, i], next_actions[:, i]], -1) for i in range(3)]
        with torch.no_grad():
            first = torch.stack([critic.target_net(x)[:, 0] for x in following], -1)
            second = torch.stack([critic.target_twin_net(x)[:, 0] for x in following], -1)
            mixed_first = mixer.target_hypernetworks(first, next_state)
            mixed_second = mixer.target_twin_hypernetworks(second, next_state)
            twin_tot = mixer.twin_hypernetworks(
                torch.stack([critic.twin_net(x)[:, 0] for x in taken], -1), state
            )
        assert not torch.allclose(mixed_first, mixed_second)  # two independent inits
        expected = team_sum(rewards, [0, 1, 2]) + gamma * (1 - done) * torch.minimum(
            mixed_first, mixed_second
        )
        assert values.shape == (len(rewards), 1, 2)
        torch.testing.assert_close(targets[:, 0, 0], expected)
        torch.testing.assert_close(targets[:, 0, 1], expected)
        torch.testing.assert_close(values[:, 0, 0], q_tot)
        torch.testing.assert_close(values[:, 0, 1].detach(), twin_tot)
        torch.testing.assert_close(td[:, 0], (expected - q_tot).detach())
        lowered = mixed_first - torch.minimum(mixed_first, mixed_second)
        gap = learner.metrics.peek(("ddpg_team", "twin_target_gap"))
        assert float(gap) == pytest.approx(float(lowered.mean()), rel=1e-5)
        # Which target is lower at init depends on the draw; pull the twin target critic
        # down so the min binds on every row and the gap must be positive.
        last = [m for m in critic.target_twin_net.modules() if isinstance(m, torch.nn.Linear)][-1]
        with torch.no_grad():
            last.bias -= 100.0
            second = torch.stack([critic.target_twin_net(x)[:, 0] for x in following], -1)
            mixed_second = mixer.target_twin_hypernetworks(second, next_state)
        assert (mixed_second < mixed_first).all()
        learner._mixed(*mixed_inputs)
        gap = learner.metrics.peek(("ddpg_team", "twin_target_gap"))
        assert float(gap) == pytest.approx(float((mixed_first - mixed_second).mean()), rel=1e-5)
        assert float(gap) > 0.0
    finally:
        algo.stop()


def test_iddpg_twin_targets_and_smoothed_target_actions(ray_session):
    """``twin_q``: y_i = r_i + gamma (1 - d) min(Q'_i, twin Q'_i) at the target action;
    ``smooth_target_policy``: the learner's target actions stay within the clip of the
    target actor's action (in shares of half the range) and inside the box."""
    algo = build("iddpg", twin_q=True, smooth_target_policy=True, target_noise_clip=0.3)
    try:
        algo.train()
        learner = algo.learner_group._learner
        _, columns = learner_batch(algo)
        obs, next_obs, state, next_state, actions, rewards, done = columns_at_step(columns)
        actor = learner.module[target_module_id("shared")]
        plain = actor.actions(next_obs[:, 0]).detach()
        smoothed = learner._target_action(0, next_obs[:, 0])
        half = 0.5 * (actor.high - actor.low)
        assert (smoothed - plain).abs().max() <= (0.3 * half).max() + 1e-6
        assert not torch.allclose(smoothed, plain)
        assert ((smoothed >= actor.low) & (smoothed <= actor.high)).all()
        next_actions = torch.stack([plain] * 3, 1)
        (values, targets), _, _ = learner._local(
            [0, 1, 2], obs, next_obs, actions, next_actions, next_actions, rewards, done
        )
        critic = learner.module[critic_module_id("shared")]
        for i in range(3):
            x = torch.cat([next_obs[:, i], next_actions[:, i]], -1)
            smaller = torch.minimum(critic.target_net(x), critic.target_twin_net(x))[:, 0]
            y = rewards[:, i] + learner.settings.gamma * (1 - done) * smaller
            torch.testing.assert_close(targets[:, 0, i], y.detach())
            torch.testing.assert_close(targets[:, 0, 3 + i], y.detach())
            x_taken = torch.cat([obs[:, i], actions[:, i]], -1)
            torch.testing.assert_close(values[:, 0, 3 + i], critic.twin_net(x_taken)[:, 0])
    finally:
        algo.stop()


@pytest.mark.parametrize("name", ["maddpg", "facmac"])
def test_trains_on_mamujoco_halfcheetah_2x3(ray_session, name):
    pytest.importorskip("gymnasium_robotics", reason="the mamujoco extra is not installed")
    env = make_env("mamujoco:HalfCheetah", agent_conf="2x3", max_episode_steps=50)
    algo = build(name, env=env, share_policy="individual", hyperparam_source="default")
    try:
        for _ in range(2):
            result = algo.train()
        row = algos.get(name).spec.progress(result)
        assert row["replay_buffer_episodes"] >= 2
        assert np.isfinite(row["replay_td_error"]) and np.isfinite(row["replay_q"])
        assert {"agent_0", "agent_1"} <= set(result["learners"])
    finally:
        algo.stop()
