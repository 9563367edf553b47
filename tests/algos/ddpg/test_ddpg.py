"""iddpg / maddpg / facmac on RLlib: one iteration each, critic targets against a
step-by-step reference, where the actors' gradients flow, Polyak targets, ROER,
teams, refusals."""

import copy
import dataclasses

import numpy as np
import pytest
import torch

from marllib_ext import algos, make_env
from marllib_ext.algos.team_replay import PROGRESS_KEY
from marllib_ext.errors import ConfigError
from marllib_ext.ops.roer import js_priority, kl_priority, per_priority
from marllib_ext.ops.td import team_sum
from marllib_ext.policies.ddpg import critic_module_id
from marllib_ext.policies.q_agent import target_module_id
from marllib_ext.rllib_compat import local_learner, priorities_from_learner

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


def team_terms(learner, view, module_id="ddpg_team"):
    """The team loss of every agent's team on ``view`` (a ``DDPGBatch``)."""
    return learner.team_loss(module_id=module_id, agent_index=[0, 1, 2], view=view)


@pytest.mark.parametrize("name", ["iddpg", "maddpg", "facmac"])
def test_one_iteration_updates_every_network_once_per_episode(ray_session, name):
    """learning_starts 2, 2 episodes per iteration, one update per episode: each
    iteration takes 2 updates, which move every actor and critic; the progress columns
    read the learner's own numbers."""
    algo = build(name)
    try:
        learner = local_learner(algo)
        trained = ["shared", critic_module_id("shared")]
        before = {m: copy.deepcopy(learner.module[m].state_dict()) for m in trained}
        for _ in range(2):
            result = algo.train()
            assert result[PROGRESS_KEY]["updates"] == 2
        for module_id in trained:
            after = learner.module[module_id].state_dict()
            assert any(not torch.equal(before[module_id][k], after[k]) for k in after), module_id
        row = algos.get(name).spec.progress(result)
        team = result["learners"]["ddpg_team"]
        assert row["replay_buffer_episodes"] == 4.0
        assert row["replay_q"] == pytest.approx(float(team["q_mean"]))
    finally:
        algo.stop()


def test_maddpg_targets_and_own_action_gradients(ray_session):
    """Critic target y = r_team + gamma (1 - d) Q'_i(s', mu'(o')) written out per sample;
    actor i's objective moves only actor i's weights and no critic weight."""
    algo = build("maddpg", share_policy="individual")
    try:
        algo.train()
        learner = local_learner(algo)
        _, columns = learner_batch(algo)
        view = learner.batch_view(columns)
        agents = learner.agents
        next_actions = torch.stack(
            [
                learner.module[target_module_id(a)].actions(view.next_obs[:, i])
                for i, a in enumerate(agents)
            ],
            dim=1,
        ).detach()
        torch.testing.assert_close(view.next_actions, next_actions)  # no smoothing in maddpg
        terms = team_terms(learner, view).terms
        targets, objective = terms["targets"], terms["objective"]
        gamma = learner.settings.gamma
        for b in range(8):
            for i, agent in enumerate(agents):
                critic = learner.module[critic_module_id(agent)]
                x = torch.cat([view.next_state[b], next_actions[b].flatten()])
                y = view.rewards[b].sum() + gamma * (1 - view.done[b]) * critic.target_net(x)[0]
                assert targets[b, i].item() == pytest.approx(y.item(), rel=1e-5, abs=1e-6)
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
        learner = local_learner(algo)
        _, columns = learner_batch(algo)
        view = learner.batch_view(columns)
        agents = learner.agents
        next_obs, next_state, next_actions = view.next_obs, view.next_state, view.next_actions
        rewards, done = view.rewards, view.done
        terms = team_terms(learner, view).terms
        targets, objective = terms["targets"], terms["objective"]
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
        learner = local_learner(algo)
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
        learner = local_learner(algo)
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


# Each rule's numbers are unit-tested in tests/replay/test_prioritization.py; the slow
# tier runs KL and PER through the learner too.
@pytest.mark.parametrize(
    "per_type", ["JS", *(pytest.param(t, marks=pytest.mark.slow) for t in ("KL", "PER"))]
)
def test_priorities_follow_the_per_type_rule_on_maddpg(ray_session, per_type):
    """The priorities handed to the store are the ``per_type`` rule on each step's TD
    errors, averaged over the team's critics, written out here for JS, KL and PER; each
    rule's numbers differ from the other two's."""
    algo = build("maddpg", per_type=per_type, share_policy="individual")
    try:
        algo.train()
        learner = local_learner(algo)
        _, columns = learner_batch(algo)
        learner.compute_losses(fwd_out=None, batch={"ddpg_team": columns})
        handed = priorities_from_learner(
            {"ddpg_team": learner.metrics.reduce()["ddpg_team"]}, "ddpg_team"
        )
        td = team_terms(learner, learner.batch_view(columns)).td_errors.double()  # (B, 1, 3)
        settings = learner.settings
        rules = {
            "JS": lambda x: js_priority(
                x,
                temp=settings.temp,
                max_clip=settings.max_clip,
                js_min_weight=settings.js_min_weight,
                js_max_weight=settings.js_max_weight,
                normalize=settings.std_normalize,
            )[0],
            "KL": lambda x: kl_priority(
                x,
                temp=settings.temp,
                min_clip=settings.min_clip,
                max_clip=settings.max_clip,
                normalize=settings.std_normalize,
            )[0],
            "PER": per_priority,
        }
        expected = {
            name: rule(td.reshape(-1)).reshape(td.shape).mean(-1) for name, rule in rules.items()
        }
        np.testing.assert_allclose(handed, expected[per_type].numpy(), rtol=1e-5)
        for other in set(rules) - {per_type}:
            assert not np.allclose(handed, expected[other].numpy(), rtol=1e-3)
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
    is the mean of both mixed critics' squared errors."""
    algo = build("facmac", twin_q=True)
    try:
        algo.train()
        learner = local_learner(algo)
        _, columns = learner_batch(algo)
        view = learner.batch_view(columns)
        obs, next_obs, state, next_state = view.obs, view.next_obs, view.state, view.next_state
        critic = learner.module[critic_module_id("shared")]
        term = team_terms(learner, view)
        values, twin_values, targets = (term.terms[k] for k in ("values", "twin_values", "targets"))
        mixer = learner.module["ddpg_team"]
        gamma = learner.settings.gamma
        taken = [torch.cat([obs[:, i], view.actions[:, i]], -1) for i in range(3)]
        following = [torch.cat([next_obs[:, i], view.next_actions[:, i]], -1) for i in range(3)]
        with torch.no_grad():
            first = torch.stack([critic.target_net(x)[:, 0] for x in following], -1)
            second = torch.stack([critic.target_twin_net(x)[:, 0] for x in following], -1)
            mixed_first = mixer.target_hypernetworks(first, next_state)
            mixed_second = mixer.target_twin_hypernetworks(second, next_state)
            q_tot = mixer.hypernetworks(
                torch.stack([critic.net(x)[:, 0] for x in taken], -1), state
            )
            twin_tot = mixer.twin_hypernetworks(
                torch.stack([critic.twin_net(x)[:, 0] for x in taken], -1), state
            )
        assert not torch.allclose(mixed_first, mixed_second)  # two independent inits
        expected = team_sum(view.rewards, [0, 1, 2]) + gamma * (1 - view.done) * torch.minimum(
            mixed_first, mixed_second
        )
        assert values.shape == twin_values.shape == (len(view.rewards), 1)
        torch.testing.assert_close(targets[:, 0], expected)
        torch.testing.assert_close(values[:, 0].detach(), q_tot)
        torch.testing.assert_close(twin_values[:, 0].detach(), twin_tot)
        torch.testing.assert_close(term.td_errors[:, 0, 0], (expected - q_tot).detach())
        weights = view.weights * view.mask
        first_error = (weights * (q_tot - expected).square()).sum() / view.mask.sum()
        twin_error = (weights * (twin_tot - expected).square()).sum() / view.mask.sum()
        assert float(term.metrics["critic_loss"]) == pytest.approx(
            float(0.5 * (first_error + twin_error)), rel=1e-5
        )
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
        team_terms(learner, view)
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
        learner = local_learner(algo)
        _, columns = learner_batch(algo)
        view = learner.batch_view(columns)
        obs, next_obs, actions, rewards = view.obs, view.next_obs, view.actions, view.rewards
        actor = learner.module[target_module_id("shared")]
        plain = actor.actions(next_obs[:, 0]).detach()
        smoothed = learner.target_action(0, next_obs[:, 0])
        half = 0.5 * (actor.high - actor.low)
        assert (smoothed - plain).abs().max() <= (0.3 * half).max() + 1e-6
        assert not torch.allclose(smoothed, plain)
        assert ((smoothed >= actor.low) & (smoothed <= actor.high)).all()
        next_actions = torch.stack([plain] * 3, 1)
        view = dataclasses.replace(view, next_actions=next_actions)
        terms = team_terms(learner, view).terms
        critic = learner.module[critic_module_id("shared")]
        for i in range(3):
            x = torch.cat([next_obs[:, i], next_actions[:, i]], -1)
            smaller = torch.minimum(critic.target_net(x), critic.target_twin_net(x))[:, 0]
            y = rewards[:, i] + learner.settings.gamma * (1 - view.done) * smaller
            torch.testing.assert_close(terms["targets"][:, i], y.detach())
            x_taken = torch.cat([obs[:, i], actions[:, i]], -1)
            torch.testing.assert_close(terms["twin_values"][:, i], critic.twin_net(x_taken)[:, 0])
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
