"""iql / vdn / qmix on RLlib: one iteration each, alignment of stored team transitions,
targets, ROER priorities, GRU agents, checkpoints, refusals."""

import copy
import dataclasses

import numpy as np
import pytest
import torch
from gymnasium import spaces

from marllib_ext import algos, make_env
from marllib_ext.algos.team_replay import PROGRESS_KEY
from marllib_ext.envs import register_env
from marllib_ext.errors import ConfigError
from marllib_ext.ops.joint_q import linear_schedule
from marllib_ext.policies.q_agent import target_module_id
from marllib_ext.rllib_compat import local_learner, priorities_from_learner
from tests.helpers import EPISODE_LENGTH, CounterEnv, TwoTeamCounterEnv, reward_of

N_ACTIONS = 3


class ActionEchoEnv(CounterEnv):
    """CounterEnv whose observation also carries the agent's previous action:
    obs_i(t) = (uid, t, i, a_i(t - 1)), so the action of step t is in o_i(t + 1)."""

    def observation_space(self, agent):
        return spaces.Box(-np.inf, np.inf, (4,), np.float32)

    def action_space(self, agent):
        return spaces.Discrete(N_ACTIONS)

    def _obs(self):
        return {
            a: np.array([self.uid, self.t, i, self.last_actions.get(a, -1)], np.float32)
            for i, a in enumerate(self.possible_agents)
        }

    def reset(self, seed=None, options=None):
        self.last_actions = {}
        return super().reset(seed=seed, options=options)

    def step(self, actions):
        self.last_actions = {a: int(actions[a]) for a in actions}
        return super().step(actions)


register_env("test:jq_echo", ActionEchoEnv, state_source="observations")
register_env(
    "test:jq_two_teams",
    TwoTeamCounterEnv,
    team_prefix=["blue_", "red_"],
    all_agents_one_policy=True,
    state_source="observations",
    max_episode_steps=EPISODE_LENGTH,
)
SMALL = {
    "hyperparam_source": "toy",
    "batch_episode": 4,
    "num_envs_per_env_runner": 2,
    "hiddens": [16],
    "rnn_hidden_dim": 8,
    "mixer_embed_dim": 8,
    "hypernet_embed_dim": 8,
}


def build(name, env="test:jq_echo", share_policy="all", **overrides):
    config = algos.get(name, **{**SMALL, **overrides}).rllib_config(
        env, share_policy=share_policy, seed=0
    )
    return config.build_algo()


@pytest.mark.parametrize("name", ["iql", "vdn", "qmix"])
def test_iterations_update_once_per_episode_on_the_epsilon_schedule(ray_session, name):
    """2 episodes per iteration, batch_episode 4: no update in the first iteration, then
    one per sampled episode, which moves the agent network; epsilon follows MARLlib's
    linear schedule at the env steps sampled."""
    algo = build(name, env="mpe:simple_spread")
    try:
        learner = local_learner(algo)
        before = copy.deepcopy(learner.module["shared"].state_dict())
        updates = []
        for _ in range(3):
            result = algo.train()
            updates.append(result[PROGRESS_KEY]["updates"])
        assert updates == [0, 2, 2]
        after = learner.module["shared"].state_dict()
        assert any(not torch.equal(before[k], after[k]) for k in after)
        row = algos.get(name).spec.progress(result)
        assert row["replay_buffer_episodes"] == 6.0
        settings = learner.settings
        steps = result["env_runners"]["num_env_steps_sampled_lifetime"]
        expected = linear_schedule(
            steps, settings.initial_epsilon, settings.final_epsilon, settings.epsilon_timesteps
        )
        assert row["replay_exploration"] == pytest.approx(expected)
        assert 0 < expected < 1
    finally:
        algo.stop()


def test_stored_team_transitions_pair_agents_at_one_env_step(ray_session):
    """Expectations come from what the env wrote into its observations: uid, step,
    agent index and the previous action."""
    algo = build("qmix", learning_starts=1000)
    try:
        for _ in range(3):
            algo.train()
        batch = algo.store.sample_transitions(300)
        for b in range(300):
            uid, t = batch.obs[b, 0, 0, 0], batch.obs[b, 0, 0, 1]
            for i in range(3):
                assert tuple(batch.obs[b, 0, i, :3]) == (uid, t, i)
                assert tuple(batch.obs[b, 1, i, :3]) == (uid, t + 1, i)
                assert batch.obs[b, 1, i, 3] == batch.actions[b, 0, i]  # a_i(t) echoed
                assert batch.rewards[b, 0, i] == pytest.approx(reward_of(int(uid), int(t), i))
            last = t == EPISODE_LENGTH - 1
            assert batch.terminated[b, 0] == float(last and int(uid) % 2 == 1)
            np.testing.assert_array_equal(batch.state[b, 0], batch.obs[b, 0, :, :].reshape(-1))
    finally:
        algo.stop()


@pytest.mark.parametrize(
    ("whole_episodes", "shape"), [(True, (2, EPISODE_LENGTH)), (None, (2 * EPISODE_LENGTH, 1))]
)
def test_feed_forward_agents_replay_whole_episodes_when_asked(
    ray_session, monkeypatch, whole_episodes, shape
):
    """``whole_episodes: true`` gives feed-forward agents PyMARL's batch of
    ``batch_episode`` whole episodes per update; by default they replay as many single
    team transitions as those episodes hold, drawn independently. The learner takes
    batches of that shape and trains."""
    algo = build("vdn", whole_episodes=whole_episodes, batch_episode=2)
    learner = local_learner(algo)
    lengths = []
    view = learner.batch_view
    monkeypatch.setattr(
        learner,
        "batch_view",
        lambda columns: lengths.append(columns["mask"].shape) or view(columns),
    )
    try:
        before = [p.detach().clone() for p in learner.module["shared"].parameters()]
        for _ in range(3):
            algo.train()
        after = list(learner.module["shared"].parameters())
    finally:
        algo.stop()
    assert lengths and all(seen == shape for seen in lengths)
    assert any(not torch.equal(a, b) for a, b in zip(before, after, strict=True))


def test_gru_agents_train_on_whole_episodes_with_js_priorities(ray_session):
    """GRU agents replay whole episodes; the priorities handed to the store are JS's
    rule on each step's team TD error (written out here), not KL's or PER's, and the
    store blends them into the old ones with ROER's EMA step per_beta."""
    algo = build("qmix", use_rnn=True, per_type="JS", batch_episode=2)
    try:
        for _ in range(3):
            algo.train()
        learner = local_learner(algo)
        sampled = algo.store.sample_episodes(2)
        assert sampled.mask.shape[1] == EPISODE_LENGTH
        batch = {"joint_q": {k: torch.as_tensor(v) for k, v in sampled.columns().items()}}
        with torch.no_grad():
            learner.compute_losses(fwd_out={}, batch=batch)
            view = learner.batch_view(batch["joint_q"])
            td = learner.team_loss(module_id="joint_q", agent_index=[0, 1, 2], view=view)
        handed = priorities_from_learner(
            {"joint_q": learner.metrics.reduce()["joint_q"]}, "joint_q"
        )
        s = learner.settings
        flat = td.td_errors.double().reshape(-1)
        js = s.js_min_weight + torch.sigmoid(
            torch.clamp(flat / s.temp, -s.max_clip, s.max_clip)
        ) * (s.js_max_weight - s.js_min_weight)
        js = (js / js.mean()).reshape(td.td_errors.shape).mean(-1).numpy()
        np.testing.assert_allclose(handed, js, rtol=1e-5)
        kl = torch.clamp(torch.exp(flat / s.temp), s.min_clip, s.max_clip)
        assert not np.allclose(handed, (kl / kl.mean()).reshape(js.shape).numpy(), rtol=1e-3)
        assert not np.allclose(handed, (flat.abs() + 1e-6).reshape(js.shape).numpy(), rtol=1e-3)
        length = sampled.mask.shape[1]
        old = algo.store.arrays["priority"][sampled.slots, :length].copy()
        algo.store.update_priorities(sampled, handed)
        new = algo.store.arrays["priority"][sampled.slots, :length]
        once = np.unique(sampled.slots, return_counts=True)
        single = np.isin(sampled.slots, once[0][once[1] == 1])
        steps = (sampled.mask > 0) & single[:, None]
        np.testing.assert_allclose(
            new[steps], ((1 - s.per_beta) * old + s.per_beta * handed)[steps], rtol=1e-5
        )
    finally:
        algo.stop()


def test_hard_target_update_copies_online_networks(ray_session):
    # One update per iteration (2 episodes), after which a copy is due.
    algo = build("qmix", target_network_update_freq=1, training_intensity=0.5)
    try:
        for _ in range(3):
            algo.train()
        learner = local_learner(algo)
        online = learner.module["shared"].state_dict()
        target = learner.module[target_module_id("shared")].state_dict()
        for key in online:
            torch.testing.assert_close(online[key], target[key])
    finally:
        algo.stop()


def test_targets_lag_without_a_due_update(ray_session):
    algo = build("vdn", target_network_update_freq=10_000)
    try:
        for _ in range(3):
            algo.train()
        learner = local_learner(algo)
        online = learner.module["shared"].state_dict()
        target = learner.module[target_module_id("shared")].state_dict()
        assert any(not torch.equal(online[k], target[k]) for k in online)
    finally:
        algo.stop()


def test_state_normalize_standardizes_the_mixer_state_with_running_moments(ray_session):
    algo = build("qmix", state_normalize=True)
    try:
        mixer = local_learner(algo).module["joint_q"]
        assert mixer.state_normalize and float(mixer.state_count) == 0.0
        algo.train()
        algo.train()
        count = float(mixer.state_count)
        assert count > 0
        # The moments move with each update, before the loss, never inside it.
        learner = local_learner(algo)
        sampled = algo.store.sample_transitions(16)
        batch = {"joint_q": {k: torch.as_tensor(v) for k, v in sampled.columns().items()}}
        learner.compute_losses(fwd_out={}, batch=batch)
        assert float(mixer.state_count) == count
        # The echo env's state carries the step counter t: its running mean is > 0 and
        # a state at the running mean reaches the hypernetworks as zeros.
        assert mixer.state_mean.abs().max() > 0
        state = mixer.state_mean.expand(2, 1, -1).clone()
        values = torch.zeros(2, 1, mixer.model_config["n_agents"])
        with torch.no_grad():
            mixed = mixer.mix(values, state)
            zeros = mixer.hypernetworks(values.reshape(2, -1), torch.zeros_like(state[:, 0]))
        torch.testing.assert_close(mixed.reshape(-1), zeros)
        assert "state_mean" in mixer.state_dict()  # travels with checkpoints
    finally:
        algo.stop()


@pytest.mark.parametrize("name", ["iql", "qmix"])
def test_running_reward_moments_are_those_of_every_reward_trained_on(ray_session, name):
    """``reward_moments: running``: before each loss the first team's mixer adds the
    batch's real-step rewards to its moments; the loss reads ``(r - mean) / std``."""
    algo = build(name, reward_moments="running", state_normalize=name == "qmix")
    try:
        learner = local_learner(algo)
        moments = learner.module["joint_q"]
        assert float(moments.reward_count) == 0.0
        algo.train()
        algo.train()
        assert float(moments.reward_count) > 0
        sampled = algo.store.sample_transitions(16)
        columns = {k: torch.as_tensor(v) for k, v in sampled.columns().items()}
        before = (moments.reward_mean.clone(), moments.reward_var.clone())
        count = float(moments.reward_count)
        learner.observe({"joint_q": columns})
        real = columns["rewards"][columns["mask"].bool()].reshape(-1).double()
        assert float(moments.reward_count) == count + real.numel()
        # Chan's merge of the old moments with this batch's, by hand
        total = count + real.numel()
        delta = real.mean() - before[0].double()
        mean = before[0].double() + delta * real.numel() / total
        var = (
            before[1].double() * count
            + real.var(unbiased=False) * real.numel()
            + delta**2 * count * real.numel() / total
        ) / total
        assert float(moments.reward_mean) == pytest.approx(float(mean), rel=1e-5)
        assert float(moments.reward_var) == pytest.approx(float(var), rel=1e-5)
        view = learner.batch_view(columns)
        want = (columns["rewards"] - moments.reward_mean) / torch.sqrt(moments.reward_var + 1e-8)
        torch.testing.assert_close(view.rewards, want * columns["mask"].unsqueeze(-1))
        assert "reward_mean" in moments.state_dict()  # travels with checkpoints
    finally:
        algo.stop()


@pytest.mark.parametrize("name", ["iql", "qmix"])
def test_common_reward_standardizes_the_team_sum_every_agent_trains_on(ray_session, name):
    """``common_reward`` (EPyMARL's): the running moments are those of the team's summed
    reward, and every agent's reward in the loss is ``(R - mean) / std`` of that sum."""
    algo = build(name, reward_moments="running", common_reward=True)
    try:
        learner = local_learner(algo)
        moments = learner.module["joint_q"]
        algo.train()
        sampled = algo.store.sample_transitions(16)
        columns = {k: torch.as_tensor(v) for k, v in sampled.columns().items()}
        count = float(moments.reward_count)
        learner.observe({"joint_q": columns})
        team = columns["rewards"][columns["mask"].bool()].sum(-1)  # (N,) one per step
        assert float(moments.reward_count) == count + team.numel()
        view = learner.batch_view(columns)
        summed = columns["rewards"].sum(-1, keepdim=True).expand_as(columns["rewards"])
        want = (summed - moments.reward_mean) / torch.sqrt(moments.reward_var + 1e-8)
        torch.testing.assert_close(view.rewards, want * columns["mask"].unsqueeze(-1))
        assert not torch.equal(columns["rewards"], summed)  # the echo env's differ by agent
    finally:
        algo.stop()


def test_vdn_with_common_reward_takes_the_team_sum_once(ray_session):
    """Without standardization the team target is the same with or without
    ``common_reward``: ``R`` once, not ``n`` copies of it."""
    algo = build("vdn", reward_standardize=False)
    try:
        algo.train()
        learner = local_learner(algo)
        sampled = algo.store.sample_transitions(16)
        batch = {"joint_q": {k: torch.as_tensor(v) for k, v in sampled.columns().items()}}
        losses, team_rewards = [], []
        agent_index = next(iter(learner.teams.values()))
        for common in (False, True):
            learner.settings = dataclasses.replace(learner.settings, common_reward=common)
            with torch.no_grad():
                losses.append(learner.compute_losses(fwd_out={}, batch=batch)["joint_q"].item())
                view = learner.batch_view(batch["joint_q"])
                team_rewards.append(learner.team_reward(view, agent_index))
    finally:
        algo.stop()
    assert losses[0] == pytest.approx(losses[1], rel=1e-6)
    # the reward Q_tot is fitted to (read by benchmarks/joint_q_mechanism.py) is R once
    torch.testing.assert_close(team_rewards[1], team_rewards[0])
    assert team_rewards[1].abs().sum() > 0


def test_batch_reward_moments_keep_no_running_state(ray_session):
    algo = build("vdn")
    try:
        assert "reward_mean" not in local_learner(algo).module["joint_q"].state_dict()
    finally:
        algo.stop()


def test_two_teams_get_one_mixer_each(ray_session):
    algo = build("qmix", env="test:jq_two_teams", share_policy="group")
    try:
        result = algo.train()
        result = algo.train()
        learners = result["learners"]
        assert {"joint_q_blue", "joint_q_red"} <= set(learners)
        assert set(local_learner(algo).module.keys()) >= {"blue", "red"}
    finally:
        algo.stop()


def test_updated_priorities_move_the_draws_off_uniform_in_the_progress_column(ray_session):
    algo = build("vdn", per_type="PER")  # |TD error| priorities differ row by row
    try:
        first = algos.get_algo_spec("vdn").progress(algo.train())
        second = algos.get_algo_spec("vdn").progress(algo.train())
    finally:
        algo.stop()
    assert first["replay_sampling_tv"] == 0.0  # no update yet: every step at max priority
    assert second["replay_sampling_tv"] > 0


def test_checkpoint_keeps_the_replay_store(ray_session, tmp_path):
    from ray.rllib.algorithms.algorithm import Algorithm

    algo = build("vdn", per_type="KL")
    try:
        algo.train()
        algo.train()
        algo.save_to_path(str(tmp_path))
        episodes, held = algo.episodes_sampled, len(algo.store)
        priorities = algo.store.arrays["priority"].copy()
    finally:
        algo.stop()
    restored = Algorithm.from_checkpoint(str(tmp_path))
    try:
        assert restored.episodes_sampled == episodes and len(restored.store) == held
        np.testing.assert_array_equal(restored.store.arrays["priority"], priorities)
        restored.train()
        assert len(restored.store) == held + 2
    finally:
        restored.stop()


def test_snapshots_and_restores_for_playing_leave_the_store_out(ray_session, tmp_path):
    """The final checkpoint keeps the store in its own directory; a policy snapshot has
    none; a restore for playing reads none yet plays the trained weights; a checkpoint
    with the store in its base state (the layout before) still restores it."""
    import pickle
    import shutil

    from ray.rllib.algorithms.algorithm import Algorithm

    from marllib_ext.algos.evaluation import evaluate
    from marllib_ext.algos.restore import restored_algorithm
    from marllib_ext.algos.team_replay.algorithm import REPLAY_COMPONENT
    from marllib_ext.rllib_compat.checkpoints import save_policy_snapshot

    algo = build("vdn")
    try:
        algo.train()
        algo.train()
        algo.save_to_path(str(tmp_path / "full"))
        save_policy_snapshot(algo, tmp_path / "snapshot")
        held, episodes = len(algo.store), algo.episodes_sampled
        weights = {
            k: v.clone() for k, v in local_learner(algo).module["shared"].state_dict().items()
        }
    finally:
        algo.stop()
    assert held > 0
    base_state = tmp_path / "full" / "algorithm_state.pkl"
    with open(base_state, "rb") as f:
        assert REPLAY_COMPONENT not in pickle.load(f)
    assert (tmp_path / "full" / REPLAY_COMPONENT / "state.pkl").is_file()
    assert not (tmp_path / "snapshot" / REPLAY_COMPONENT).exists()

    for path in (tmp_path / "full", tmp_path / "snapshot"):
        with restored_algorithm(path) as played:
            assert len(played.store) == 0 and played.episodes_sampled == 0
            restored = local_learner(played).module["shared"].state_dict()
            for key, value in weights.items():
                torch.testing.assert_close(restored[key], value)
        assert len(evaluate(path, episodes=2).team_returns) == 2

    # The layout before: the store and its counters in the base state's "team_replay".
    with open(tmp_path / "full" / REPLAY_COMPONENT / "state.pkl", "rb") as f:
        replay = pickle.load(f)
    with open(base_state, "rb") as f:
        state = pickle.load(f)
    with open(base_state, "wb") as f:
        pickle.dump({**state, REPLAY_COMPONENT: replay}, f)
    shutil.rmtree(tmp_path / "full" / REPLAY_COMPONENT)
    resumed = Algorithm.from_checkpoint(str(tmp_path / "full"))
    try:
        assert len(resumed.store) == held and resumed.episodes_sampled == episodes
    finally:
        resumed.stop()


@pytest.mark.parametrize("name", ["iql", "vdn", "qmix"])
def test_continuous_actions_are_refused_before_anything_starts(name):
    with pytest.raises(ConfigError, match="discrete actions only"):
        algos.get(name).rllib_config(make_env("mpe:simple_spread", continuous_actions=True))


def test_more_learners_than_batch_episodes_are_refused_with_the_reason():
    with pytest.raises(ConfigError, match="num_learners"):
        algos.get("qmix", num_learners=4, batch_episode=2).settings("mpe:simple_spread")


def test_vdn_learner_loss_matches_a_step_by_step_reference(ray_session):
    """The learner's TD loss on a replayed batch against a loop over samples and agents
    with the same networks (double Q, sum mixer, terminal ends, no standardization)."""
    algo = build("vdn", reward_standardize=False, gamma=0.9)
    try:
        for _ in range(3):
            algo.train()
        learner = local_learner(algo)
        sampled = algo.store.sample_transitions(64)
        batch = {"joint_q": {k: torch.as_tensor(v) for k, v in sampled.columns().items()}}
        with torch.no_grad():
            loss = learner.compute_losses(fwd_out={}, batch=batch)["joint_q"].item()
            online = learner.module["shared"]
            target = learner.module[target_module_id("shared")]
            total = 0.0
            for b in range(64):
                q_tot, next_tot, r_team = 0.0, 0.0, 0.0
                for i in range(3):
                    obs = torch.as_tensor(sampled.obs[b, 0, i])
                    next_obs = torch.as_tensor(sampled.obs[b, 1, i])
                    q_tot += online.q_sequence(obs[None, None])[0, 0, sampled.actions[b, 0, i]]
                    best = online.q_sequence(next_obs[None, None])[0, 0].argmax()
                    next_tot += target.q_sequence(next_obs[None, None])[0, 0, best]
                    r_team += sampled.rewards[b, 0, i]
                y = r_team + 0.9 * (1 - sampled.terminated[b, 0]) * next_tot
                total += (q_tot - y).item() ** 2
        assert loss == pytest.approx(total / 64, rel=1e-4)
    finally:
        algo.stop()


def test_remote_env_runners_act_with_the_learners_weights(ray_session):
    algo = build("qmix", num_env_runners=1, num_envs_per_env_runner=2, training_intensity=0.5)
    try:
        for _ in range(3):
            algo.train()
        assert len(algo.store) == 6
        learner_weights = local_learner(algo).module["shared"].state_dict()
        (runner_weights,) = algo.env_runner_group.foreach_env_runner(
            lambda runner: {k: v.clone() for k, v in runner.module["shared"].state_dict().items()},
            local_env_runner=False,
        )
        for key, value in learner_weights.items():
            torch.testing.assert_close(runner_weights[key], value)
        sampling = algo.env_runner_group.foreach_env_runner(
            lambda runner: runner.sampling, local_env_runner=False
        )
        assert sampling == ["sampling: team episodes from arrays"]
    finally:
        algo.stop()


@pytest.mark.parametrize(
    ("name", "key", "value"), [("vdn", "mixer", "qmix"), ("iql", "mixer", "vdn")]
)
def test_the_mixer_is_the_algorithms_not_a_key(name, key, value):
    with pytest.raises(ConfigError, match=key):
        algos.get(name, **{key: value}).settings("mpe:simple_spread")


def test_an_unknown_reward_moments_mode_is_refused_by_name():
    with pytest.raises(ConfigError, match="reward_moments"):
        algos.get("qmix", reward_moments="epymarl").settings("mpe:simple_spread")


@pytest.mark.parametrize(
    ("name", "learner", "mixer"),
    [("iql", "IQLLearner", "none"), ("vdn", "VDNLearner", "vdn"), ("qmix", "QMIXLearner", "qmix")],
)
def test_each_algorithm_trains_its_own_learner_and_mixer(name, learner, mixer):
    config = algos.get(name).rllib_config("mpe:simple_spread")
    assert config.learner_class.__name__ == learner
    team = config.rl_module_spec.rl_module_specs["joint_q"]
    assert team.model_config["mixer"] == mixer


def test_td_lambda_targets_are_the_lambda_returns_of_each_replayed_episode(ray_session):
    """``td_lambda``: the learner's TD loss on replayed whole episodes against the
    λ-returns written out per episode (``tests.ops.test_td.slow_td_lambda``) on the same
    networks' double-Q ``Q_tot``."""
    from tests.ops.test_td import slow_td_lambda

    gamma, lam = 0.9, 0.6
    algo = build("vdn", reward_standardize=False, gamma=gamma, whole_episodes=True, td_lambda=lam)
    try:
        for _ in range(3):
            algo.train()
        learner = local_learner(algo)
        sampled = algo.store.sample_episodes(4)
        columns = sampled.columns()
        batch = {"joint_q": {k: torch.as_tensor(v) for k, v in columns.items()}}
        online = learner.module["shared"]
        target = learner.module[target_module_id("shared")]
        with torch.no_grad():
            loss = learner.compute_losses(fwd_out={}, batch=batch)["joint_q"].item()
            obs = torch.as_tensor(columns["obs"])  # (B, L + 1, n, d)
            q_online = torch.stack([online.q_sequence(obs[:, :, i]) for i in range(3)], 2)
            q_target = torch.stack([target.q_sequence(obs[:, :, i]) for i in range(3)], 2)
        actions = torch.as_tensor(columns["actions"]).long()
        chosen = q_online[:, :-1].gather(-1, actions[..., None])[..., 0].sum(-1).numpy()
        best = q_online[:, 1:].argmax(-1, keepdim=True)
        next_total = q_target[:, 1:].gather(-1, best)[..., 0].sum(-1).numpy()
        mask = columns["mask"].astype(float)
        rewards = columns["rewards"].sum(-1)
        targets = slow_td_lambda(rewards, columns["terminated"], next_total, mask, gamma, lam)
        expected = ((chosen - targets) ** 2 * mask).sum() / mask.sum()
        assert loss == pytest.approx(expected, rel=1e-4)
        assert not np.allclose(targets, rewards + gamma * (1 - columns["terminated"]) * next_total)
    finally:
        algo.stop()


@pytest.mark.parametrize("name", ["vdn", "iql"])
def test_without_bootstrap_truncated_every_episode_end_is_terminal(ray_session, name):
    """``bootstrap_truncated: false`` (EPyMARL's runner on LBF): the last step of a
    truncated episode bootstraps nothing, as a terminal one; the loss against one-step
    targets written out with that flag."""
    gamma = 0.9
    algo = build(
        name, reward_standardize=False, gamma=gamma, whole_episodes=True, bootstrap_truncated=False
    )
    try:
        for _ in range(3):
            algo.train()
        learner = local_learner(algo)
        columns = algo.store.sample_episodes(8).columns()
        mask = columns["mask"].astype(float)
        last = np.zeros_like(mask)
        last[np.arange(len(mask)), mask.sum(1).astype(int) - 1] = 1.0
        truncated_rows = (last * (1 - columns["terminated"])).sum()
        assert truncated_rows > 0  # CounterEnv truncates its even episodes
        batch = {"joint_q": {k: torch.as_tensor(v) for k, v in columns.items()}}
        online = learner.module["shared"]
        target = learner.module[target_module_id("shared")]
        with torch.no_grad():
            loss = learner.compute_losses(fwd_out={}, batch=batch)["joint_q"].item()
            obs = torch.as_tensor(columns["obs"])
            q_online = torch.stack([online.q_sequence(obs[:, :, i]) for i in range(3)], 2)
            q_target = torch.stack([target.q_sequence(obs[:, :, i]) for i in range(3)], 2)
        actions = torch.as_tensor(columns["actions"]).long()
        chosen = q_online[:, :-1].gather(-1, actions[..., None])[..., 0].numpy()
        best = q_online[:, 1:].argmax(-1, keepdim=True)
        following = q_target[:, 1:].gather(-1, best)[..., 0].numpy()
        rewards = columns["rewards"]
        if name == "vdn":
            targets = rewards.sum(-1) + gamma * (1 - last) * following.sum(-1)
            expected = ((chosen.sum(-1) - targets) ** 2 * mask).sum() / mask.sum()
        else:  # every agent acts at every step here
            targets = rewards + gamma * (1 - last[..., None]) * following
            expected = ((chosen - targets) ** 2 * mask[..., None]).sum() / (3 * mask.sum())
        assert loss == pytest.approx(expected, rel=1e-4)
    finally:
        algo.stop()


def test_bootstrap_truncated_false_needs_whole_episodes():
    with pytest.raises(ConfigError, match="bootstrap_truncated"):
        algos.vdn(bootstrap_truncated=False, whole_episodes=False).settings("toy:coordination")


def test_td_lambda_needs_whole_episodes():
    with pytest.raises(ConfigError, match="td_lambda"):
        algos.vdn(td_lambda=0.6, whole_episodes=False).settings("toy:coordination")


def test_agents_see_their_id_and_last_action(ray_session):
    """``obs_agent_id`` / ``obs_last_action``: every stored observation ends with the
    agent's one-hot id and the one-hot of the action it took at the step before (zeros
    at an episode's first step); the Q networks take the wider input."""
    algo = build("vdn", obs_agent_id=True, obs_last_action=True, whole_episodes=True)
    try:
        algo.train()
        columns = algo.store.sample_episodes(4).columns()
    finally:
        algo.stop()
    obs, actions, mask = columns["obs"], columns["actions"], columns["mask"].astype(bool)
    n_agents = obs.shape[2]
    assert obs.shape[-1] == 4 + n_agents + N_ACTIONS
    ids = obs[..., 4 : 4 + n_agents]
    last = obs[..., 4 + n_agents :]
    for b in range(obs.shape[0]):
        steps = int(mask[b].sum())
        for i in range(n_agents):
            np.testing.assert_array_equal(
                ids[b, : steps + 1, i], np.eye(n_agents)[i][None].repeat(steps + 1, 0)
            )
            assert not last[b, 0, i].any()
            np.testing.assert_array_equal(
                last[b, 1 : steps + 1, i], np.eye(N_ACTIONS)[actions[b, :steps, i]]
            )


@pytest.mark.parametrize("name", ["vdn", "qmix"])
def test_the_pymarl2_source_is_its_finetuned_qmix(name):
    settings = algos.get(name, "pymarl2").settings("smax:3m")
    assert (settings.optimizer, settings.lr, settings.td_lambda) == ("adam", 0.001, 0.6)
    assert (settings.batch_episode, settings.buffer_size) == (128, 5000)
    assert settings.epsilon_timesteps == 100000 and settings.final_epsilon == 0.05
    assert settings.use_rnn and settings.rnn_hidden_dim == 64 and settings.samples_whole_episodes
    assert settings.obs_agent_id and settings.obs_last_action
    assert settings.training_intensity == 0.125 and settings.num_envs_per_env_runner == 8
    assert not settings.reward_standardize
    assert settings.episodes_before_learning == 128
    assert settings.state_normalize == (name == "qmix")  # SMAX's raw state (qmix.yaml)


def test_pymarl2_iql_keeps_one_step_targets_and_a_batch_of_32():
    settings = algos.get("iql", "pymarl2").settings("smax:3m")
    assert settings.td_lambda is None and settings.batch_episode == 32 and settings.lr == 0.0005
    assert settings.optimizer == "adam" and settings.use_rnn


@pytest.mark.parametrize("name", ["iql", "vdn", "qmix"])
def test_the_epymarl_source_is_its_q_learner_on_lbf(name):
    settings = algos.get(name, "epymarl", final_epsilon=0.1).settings("toy:coordination")
    assert (settings.optimizer, settings.lr, settings.batch_episode) == ("adam", 0.0005, 32)
    assert settings.samples_whole_episodes and not settings.use_rnn
    assert settings.obs_agent_id and not settings.obs_last_action
    assert settings.running_reward_moments and settings.td_lambda is None
    assert settings.common_reward  # the summed team reward, as EPyMARL's default
    assert settings.final_epsilon == 0.1  # --set still overrides


@pytest.mark.parametrize(
    ("optimizer", "eps", "expected"),
    [
        ("rmsprop", None, (torch.optim.RMSprop, 1e-5)),
        ("adam", None, (torch.optim.Adam, 1e-8)),
        ("adam", 1e-4, (torch.optim.Adam, 1e-4)),
    ],
)
def test_the_optimizer_and_its_parameters_are_settings(ray_session, optimizer, eps, expected):
    algo = build("vdn", optimizer=optimizer, optimizer_eps=eps, rmsprop_alpha=0.9)
    try:
        learner = local_learner(algo)
        optimizers = [o for _, o in learner.get_optimizers_for_module("shared")]
    finally:
        algo.stop()
    assert optimizers and all(isinstance(o, expected[0]) for o in optimizers)
    group = optimizers[0].param_groups[0]
    assert group["eps"] == expected[1]
    if optimizer == "rmsprop":
        assert group["alpha"] == 0.9


def test_a_bad_rmsprop_alpha_is_refused_by_name():
    with pytest.raises(ConfigError, match="rmsprop_alpha"):
        algos.vdn(rmsprop_alpha=1.5).settings("toy:coordination")


def test_a_small_mixer_init_scale_starts_q_tot_near_zero_on_a_large_state():
    """JaxMARL's ``MIXER_INIT_SCALE``: orthogonal hypernetwork layers of that gain and
    zero biases; on SMAX-like states (coordinates up to ~26) torch's default init puts
    ``|mix(0, s)|`` at several units, a gain of 0.01 keeps it near 0."""
    from marllib_ext.policies.vd_critic import QMixHypernetworks

    torch.manual_seed(0)
    state = 26.0 * torch.rand(256, 72)
    values = torch.zeros(256, 3)
    default = QMixHypernetworks(72, 3, 32, 64)
    small = QMixHypernetworks(72, 3, 32, 64, init_scale=0.01)
    with torch.no_grad():
        assert default(values, state).abs().mean() > 0.5
        assert small(values, state).abs().mean() < 1e-2
    layer = small.w1[0].weight
    torch.testing.assert_close(  # orthogonal rows of norm 0.01
        layer @ layer.T, 1e-4 * torch.eye(layer.shape[0]), atol=1e-8, rtol=1e-4
    )
    assert all(m.bias.abs().max() == 0 for m in small.modules() if isinstance(m, torch.nn.Linear))


def test_the_mixer_init_scale_reaches_the_team_mixer(ray_session):
    algo = build("qmix", mixer_init_scale=0.01)
    try:
        mixer = local_learner(algo).module["joint_q"]
        weight = mixer.hypernetworks.b1.weight
        assert float(weight.norm(dim=1).max()) == pytest.approx(0.01, rel=1e-3)
        torch.testing.assert_close(weight, mixer.target_hypernetworks.b1.weight)
    finally:
        algo.stop()


def test_a_gru_agents_sequence_is_its_cell_stepped_from_zeros():
    """``q_sequence`` (torch's fused GRU on the cell's weights) gives the values and
    gradients of stepping the ``GRUCell`` from a zero state, and keeps one set of
    weights in the state dict."""
    from marllib_ext.policies.q_agent import QAgentRLModule

    module = QAgentRLModule(
        observation_space=spaces.Box(-1.0, 1.0, (5,), np.float32),
        action_space=spaces.Discrete(4),
        model_config={
            "use_rnn": True, "rnn_hidden_dim": 8, "activation": "relu", "hiddens": [8],
            "epsilon_start": 1.0, "epsilon_end": 0.05, "epsilon_timesteps": 10,
        },
    )  # fmt: skip
    obs = torch.randn(6, 7, 5)
    fused = module.q_sequence(obs)
    hidden, stepped = torch.zeros(6, 8), []
    for t in range(7):
        hidden = module.gru(module.encoder(obs[:, t]), hidden)
        stepped.append(module.head(hidden))
    stepped = torch.stack(stepped, 1)
    torch.testing.assert_close(fused, stepped)
    (fused_grad,) = torch.autograd.grad(fused.square().sum(), module.gru.weight_hh)
    (stepped_grad,) = torch.autograd.grad(stepped.square().sum(), module.gru.weight_hh)
    torch.testing.assert_close(fused_grad, stepped_grad)
    assert not any(key.startswith("sequence_gru") for key in module.state_dict())


def test_a_gru_agent_unrolled_in_segments_gives_the_padded_values_and_gradients(monkeypatch):
    """With each sequence's real steps, a GRU agent unrolls only the sequences still
    running (``ops.sequences.unroll_segments``): on the real steps the values and the
    weights' gradients are the padded unroll's."""
    from marllib_ext.policies import q_agent

    monkeypatch.setattr(q_agent, "UNROLL_SEGMENT_COST", 0.0)  # a segment per length
    torch.manual_seed(0)
    module = q_agent.QAgentRLModule(
        observation_space=spaces.Box(-1.0, 1.0, (5,), np.float32),
        action_space=spaces.Discrete(4),
        model_config={
            "use_rnn": True, "rnn_hidden_dim": 8, "activation": "relu", "hiddens": [8],
            "epsilon_start": 1.0, "epsilon_end": 0.05, "epsilon_timesteps": 10,
        },
    )  # fmt: skip
    lengths = torch.tensor([3, 9, 1, 9, 0, 5, 2])
    obs = torch.randn(7, 9, 5)
    real = torch.arange(9)[None, :] < lengths[:, None]  # (B, L)
    padded, segmented = module.q_sequence(obs), module.q_sequence(obs, lengths)
    assert segmented.shape == padded.shape
    torch.testing.assert_close(segmented[real], padded[real])
    weights = [module.gru.weight_hh, module.gru.weight_ih, module.encoder[0].weight]
    loss_grads = [
        torch.autograd.grad((q[real] * torch.arange(real.sum())[:, None]).square().sum(), weights)
        for q in (padded, segmented)
    ]
    for padded_grad, segmented_grad in zip(*loss_grads, strict=True):
        # float32 sums in another order: within 1e-5 of the gradient's scale
        scale = float(padded_grad.abs().max())
        torch.testing.assert_close(segmented_grad, padded_grad, rtol=1e-5, atol=1e-5 * scale)
    # no step past the longest sequence runs: the values there are 0
    assert len(q_agent.unroll_segments(lengths.numpy(), 9, 0.0)) == 5


def test_the_learners_unroll_without_padding_keeps_the_padded_loss(ray_session, monkeypatch):
    """Replayed episodes of different lengths: the joint-Q view (chosen values, double-Q
    bootstrap values) and the team loss's gradients are those of unrolling every
    sequence to the batch's longest."""
    from marllib_ext.policies import q_agent

    monkeypatch.setattr(q_agent, "UNROLL_SEGMENT_COST", 0.0)
    # bounded observations: the GRU's state carries over (no saturated gates)
    algo = build(
        "qmix",
        env="mpe:simple_spread",
        use_rnn=True,
        batch_episode=4,
        td_lambda=0.6,
        segmented_unroll=True,
    )
    try:
        algo.train()
        learner = local_learner(algo)
        columns = {
            k: torch.as_tensor(v).clone()
            for k, v in algo.store.sample_episodes(4).columns().items()
        }
        steps = columns["mask"].shape[1]
        ends = torch.tensor([steps, 1, 9, 17])  # rows 1-3 as episodes cut short
        t = torch.arange(steps)[None, :]
        columns["mask"] *= t < ends[:, None]
        columns["rewards"] *= (t < ends[:, None])[..., None]
        columns["terminated"] = (t == ends[:, None] - 1).float()
        columns["present"] *= (torch.arange(steps + 1)[None, :] <= ends[:, None])[..., None]
        calls = []
        segments_of = q_agent.unroll_segments
        monkeypatch.setattr(
            q_agent, "unroll_segments", lambda *a: calls.append(segments_of(*a)) or calls[-1]
        )

        def loss_and_grads(view):
            term = learner.team_loss(module_id="joint_q", agent_index=[0, 1, 2], view=view)
            params = list(learner.module["shared"].parameters())
            return term.loss, torch.autograd.grad(term.loss, params)

        segmented = learner.batch_view(columns)
        assert calls and max(len(c) for c in calls) > 1  # it unrolled in segments
        segmented_loss, segmented_grads = loss_and_grads(segmented)
        original = q_agent.QAgentRLModule.q_sequence
        monkeypatch.setattr(
            q_agent.QAgentRLModule,
            "q_sequence",
            lambda self, obs, lengths=None: original(self, obs),
        )
        padded = learner.batch_view(columns)
        padded_loss, padded_grads = loss_and_grads(padded)
        torch.testing.assert_close(segmented.chosen, padded.chosen)
        torch.testing.assert_close(segmented.next_values, padded.next_values)
        torch.testing.assert_close(segmented_loss, padded_loss)
        for a, b in zip(segmented_grads, padded_grads, strict=True):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5 * float(b.abs().max()))
    finally:
        algo.stop()


@pytest.mark.parametrize(
    "share_policy", ["all", pytest.param("individual", marks=pytest.mark.slow)]
)
def test_agent_values_are_each_agents_own_sequence(ray_session, share_policy):
    """The agents of one policy run as one batch of sequences; each agent's values are
    those of its own network on its own observations alone."""
    algo = build("qmix", share_policy=share_policy, use_rnn=True, batch_episode=2)
    try:
        algo.train()
        learner = local_learner(algo)
        obs = torch.randn(3, 5, len(learner.agents), 4)
        with torch.no_grad():
            for target in (False, True):
                values = learner.agent_q_values(obs, target=target)
                for index, agent in enumerate(learner.agents):
                    policy = learner.policy_of[agent]
                    network = learner.module[target_module_id(policy) if target else policy]
                    torch.testing.assert_close(
                        values[:, :, index], network.q_sequence(obs[:, :, index])
                    )
    finally:
        algo.stop()
