"""masac / hasac on RLlib: the soft target written out per sample, where each loss's
gradient goes, the discrete expectation against a loop, Polyak targets, the
temperature, and HASAC's sequential steps."""

import copy
import math

import numpy as np
import pytest
import torch

from marllib_ext import algos, make_env
from marllib_ext.algos.team_replay import PROGRESS_KEY
from marllib_ext.errors import ConfigError
from marllib_ext.rllib_compat import local_learner

SMALL = {
    "batch_episode": 4,
    "learning_starts": 2,
    "num_envs_per_env_runner": 2,
    "actor_hiddens": [16],
    "critic_hiddens": [16],
}
TEAM = "soft_critic"


def spread(continuous=True):
    return make_env("mpe:simple_spread", continuous_actions=continuous, max_cycles=10)


def build(name="masac", env=None, share_policy="individual", **overrides):
    config = algos.get(name, **{**SMALL, **overrides}).rllib_config(
        env or spread(), share_policy=share_policy, seed=0
    )
    return config.build_algo()


def batch_view(algo, size=32):
    learner = local_learner(algo)
    sampled = algo.store.sample_transitions(size)
    columns = {k: torch.as_tensor(v) for k, v in sampled.columns().items()}
    return learner, learner.batch_view(columns)


@pytest.fixture(params=["masac", "hasac"])
def trained(request, ray_session):
    algo = build(request.param)
    algo.train()
    yield request.param, algo
    algo.stop()


def test_one_iteration_moves_every_actor_the_critic_and_the_temperatures(trained):
    name, algo = trained
    learner = local_learner(algo)
    modules = [*learner.policies, TEAM]
    before = {m: copy.deepcopy(learner.module[m].state_dict()) for m in modules}
    result = algo.train()
    assert result[PROGRESS_KEY]["updates"] == 2
    for module_id in modules:
        after = learner.module[module_id].state_dict()
        moved = [k for k in after if not torch.equal(before[module_id][k], after[k])]
        assert moved, module_id
        if module_id != TEAM:
            assert "log_alpha" in moved, module_id
    team = result["learners"][TEAM]
    assert math.isfinite(team["critic_loss"]) and 0 < team["alpha"] < 2
    assert ("team_alpha" in team) == (name == "hasac")
    row = algos.get(name).spec.progress(result)
    assert row["replay_q"] == pytest.approx(float(team["q_mean"]))


def test_the_soft_target_per_sample(trained):
    """y = r_team + gamma (1 - d) (min(Q'_1, Q'_2)(s', a') - sum_i alpha_i log pi_i(a'_i))
    with a'_i drawn from the current policies (hasac: one team alpha)."""
    name, algo = trained
    learner, view = batch_view(algo)
    critic = learner.module[TEAM]
    index = [0, 1, 2]
    torch.manual_seed(7)  # before the loss: hasac's loss steps the actors
    drawn = [learner.actor(i).sample(view.next_obs[:, i]) for i in index]
    torch.manual_seed(7)  # the same draws, in the learner's order
    targets = learner.team_loss(module_id=TEAM, agent_index=index, view=view).terms["targets"]
    gamma = learner.settings.gamma
    for b in range(8):
        actions = torch.cat([drawn[i][0][b] * view.next_present[b, i] for i in index])
        x = torch.cat([view.next_state[b], actions])
        q = torch.minimum(critic.target_net(x)[0], critic.target_twin_net(x)[0])
        alphas = [
            (critic.log_alpha if name == "hasac" else learner.actor(i).log_alpha).exp().item()
            for i in index
        ]
        penalty = sum(
            alphas[i] * drawn[i][1][b].item() * view.next_present[b, i].item() for i in index
        )
        assert view.discount[b].item() in (0.0, pytest.approx(gamma))
        y = view.rewards[b].sum() + view.discount[b] * (q - penalty)
        assert targets[b].item() == pytest.approx(y.item(), rel=1e-4, abs=1e-5)


def test_n_step_windows_bootstrap_m_steps_on(ray_session):
    """With ``n_step`` 3 each sampled window gives the discounted sum of its real
    rewards (summed over the team) and bootstraps on the state m steps on with
    gamma^m, none after a terminal step; written out from the raw columns."""
    algo = build("masac", n_step=3, gamma=0.9)
    try:
        algo.train()
        learner = local_learner(algo)
        sampled = algo.store.sample_transitions(64, 3)
        columns = {k: torch.as_tensor(v) for k, v in sampled.columns().items()}
        assert columns["mask"].shape == (64, 3)
        view = learner.batch_view(columns)
        for b in range(64):
            m = int(columns["mask"][b].sum())
            g = sum(0.9**k * columns["rewards"][b, k].sum().item() for k in range(m))
            assert view.rewards[b].sum().item() == pytest.approx(g, rel=1e-5, abs=1e-6)
            ended = columns["terminated"][b, m - 1].item()
            assert view.discount[b].item() == pytest.approx(0.9**m * (1 - ended))
            torch.testing.assert_close(view.next_state[b], columns["state"][b, m])
            torch.testing.assert_close(view.next_obs[b], columns["obs"][b, m])
        assert (columns["mask"].sum(1) < 3).any()  # some windows reach an episode's end
    finally:
        algo.stop()


def test_the_target_is_held_fixed_and_the_actor_loss_leaves_the_critic(ray_session):
    algo = build("masac")
    try:
        algo.train()
        learner, view = batch_view(algo)
        critic = learner.module[TEAM]
        loss = learner.team_loss(module_id=TEAM, agent_index=[0, 1, 2], view=view)
        assert not loss.terms["targets"].requires_grad
        assert all(not p.requires_grad for p in critic.target_net.parameters())
        actor_term, _, _ = learner.actor_terms(TEAM, critic, [0, 1, 2], view)
        weights = critic.q_parameters()
        grads = torch.autograd.grad(actor_term, weights, allow_unused=True)
        assert all(g is None for g in grads)
        actor_weights = list(learner.actor(0).net.parameters())
        critic_term = loss.terms["critic_loss"]
        grads = torch.autograd.grad(critic_term, actor_weights, allow_unused=True)
        assert all(g is None or g.abs().sum() == 0 for g in grads)
        grads = torch.autograd.grad(actor_term, actor_weights, allow_unused=True)
        assert any(g is not None and g.abs().sum() > 0 for g in grads)
    finally:
        algo.stop()


def test_the_discrete_actor_loss_is_the_expectation_over_its_own_actions(ray_session):
    algo = build("masac", env=spread(continuous=False))
    try:
        algo.train()
        learner, view = batch_view(algo, size=16)
        critic = learner.module[TEAM]
        index = [0, 1, 2]
        torch.manual_seed(3)
        joint = [learner.sample(view.obs, view.legal, i)[0] for i in index]
        loss, mean_log_prob = learner.discrete_actor_loss(critic, view, index, joint, 1)
        log_probs = torch.log_softmax(learner.actor(1).net(view.obs[:, 1]), -1)
        alpha = learner.actor(1).alpha.item()
        rows, weights = [], []
        for b in range(16):
            total = 0.0
            for a in range(5):
                actions = [joint[i][b] * view.present[b, i] for i in index]
                actions[1] = torch.nn.functional.one_hot(torch.tensor(a), 5).float()
                actions[1] = actions[1] * view.present[b, 1]
                x = torch.cat([view.state[b], *actions])
                q = torch.minimum(critic.net(x)[0], critic.twin_net(x)[0])
                p = log_probs[b, a].exp()
                total += (p * (alpha * log_probs[b, a] - q)).item()
            rows.append(total)
            weights.append((view.mask[b] * view.present[b, 1]).item())
        expected = np.dot(rows, weights) / max(1.0, sum(weights))
        assert loss.item() == pytest.approx(expected, rel=1e-4, abs=1e-5)
        torch.testing.assert_close(mean_log_prob, (log_probs.exp() * log_probs).sum(-1))
    finally:
        algo.stop()


def test_critic_targets_follow_by_polyak_averaging(ray_session):
    algo = build("masac", tau=0.5, learning_starts=100)
    try:
        algo.train()
        learner = local_learner(algo)
        critic = learner.module[TEAM]
        with torch.no_grad():
            critic.net[0].weight.add_(1.0)
        before = critic.target_net[0].weight.clone()
        learner.after_gradient_based_update(timesteps={})
        torch.testing.assert_close(
            critic.target_net[0].weight, 0.5 * before + 0.5 * critic.net[0].weight
        )
    finally:
        algo.stop()


def test_a_fixed_temperature_stays_where_it_is_set(ray_session):
    algo = build("masac", auto_alpha=False, initial_alpha=0.05)
    try:
        for _ in range(2):
            result = algo.train()
        assert result[PROGRESS_KEY]["updates"] == 2
        learner = local_learner(algo)
        for policy in learner.policies:
            assert learner.module[policy].alpha.item() == pytest.approx(0.05)
    finally:
        algo.stop()


def test_hasac_steps_each_actor_on_the_updated_actions_of_the_agents_before_it(ray_session):
    """With deterministic (mean) actions: the critic input of the second agent in the
    order carries the first agent's action from its policy after its step."""
    algo = build("hasac")
    try:
        algo.train()
        learner, view = batch_view(algo)
        critic = learner.module[TEAM]
        sample = learner.sample
        learner.sample = lambda obs, legal, i: (
            learner.actor(i).sample(learner.agent_obs(obs, i), deterministic=True)
            if learner.continuous
            else sample(obs, legal, i)
        )
        learner.rng = np.random.default_rng(0)
        order = list(np.random.default_rng(0).permutation(3))
        first = order[0]
        before_first = learner.actor(first).sample(view.obs[:, first], deterministic=True)[0]
        weights = {p: copy.deepcopy(learner.module[p].state_dict()) for p in learner.policies}
        seen = []
        min_value = critic.min_value
        critic.min_value = lambda x: (seen.append(x.detach().clone()), min_value(x))[1]
        learner.actor_terms(TEAM, critic, [0, 1, 2], view)
        after_first = learner.actor(first).sample(view.obs[:, first], deterministic=True)[0]
        assert not torch.allclose(after_first, before_first)
        state_dim = view.state.shape[1]
        width = learner.action_width
        slot = slice(state_dim + first * width, state_dim + (first + 1) * width)
        second_input = seen[1][:, slot]
        present = view.present[:, first, None]
        torch.testing.assert_close(second_input, (after_first * present).detach())
        for policy in learner.policies:  # each actor took its own step
            after = learner.module[policy].state_dict()
            assert not torch.equal(weights[policy]["net.0.weight"], after["net.0.weight"])
    finally:
        algo.stop()


def test_refusals_name_the_field(ray_session):
    with pytest.raises(ConfigError, match="n_step"):
        algos.get("masac", n_step=3, per_type="PER").rllib_config(spread())
    with pytest.raises(ConfigError, match="discrete_target_entropy_scale"):
        algos.get("masac", discrete_target_entropy_scale=2.0).rllib_config(spread())
    with pytest.raises(ConfigError, match="num_learners"):
        algos.get("masac", num_learners=3, batch_episode=2).rllib_config(spread())
    with pytest.raises(ConfigError, match="actor_final_activation"):
        algos.get("masac", actor_final_activation="sigmoid").rllib_config(spread())


def test_harls_actor_trunk_ends_in_its_final_activation():
    """``actor_final_activation`` (HARL's ``final_activation_func``) replaces only the
    last hidden layer's activation; ``input_norm`` puts a LayerNorm before the first."""
    from marllib_ext.policies.soft_actor import SoftActorRLModule

    env = spread()
    agent = env.layout.agents[0]
    module = SoftActorRLModule(
        observation_space=env.layout.observation_spaces[agent],
        action_space=env.layout.action_spaces[agent],
        model_config={
            "hiddens": [16, 8],
            "activation": "relu",
            "final_activation": "tanh",
            "input_norm": False,
            "initial_alpha": 1.0,
        },
    )
    kinds = [type(layer).__name__ for layer in module.net]
    assert kinds == ["Linear", "ReLU", "Linear", "Tanh", "Linear"]
    obs = torch.randn(5, module.net[0].in_features)
    trunk = torch.tanh(module.net[2](torch.relu(module.net[0](obs))))
    torch.testing.assert_close(module.net(obs), module.net[4](trunk))
