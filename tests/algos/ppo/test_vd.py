"""Value decomposition: mixers, gradients, the mixer key, and efx_vdppo's advantages."""

from collections import defaultdict

import gymnasium as gym
import numpy as np
import pytest
import torch
from ray.rllib.core.columns import Columns
from ray.rllib.core.rl_module.rl_module import RLModuleSpec

from marllib_ext import algos
from marllib_ext.algos.efx import EFXVDJointAdvantageConnector, EFXVDLearner
from marllib_ext.envs import register_env
from marllib_ext.ops.mixers import qmix_hidden_preactivations, qmix_mix, vdn_mix
from marllib_ext.policies import AGENT_OBS, CRITIC_MODULE_ID, STATE, ValueDecompositionCritic
from tests.helpers import EPISODE_LENGTH as COUNTER_EPISODE_LENGTH
from tests.helpers import N_AGENTS as N_COUNTER_AGENTS
from tests.helpers import CounterEnv, counter_config, reward_of
from tests.team_advantages import recording

N_AGENTS, OBS_DIM, STATE_DIM = 3, 4, 6


def make_critic(mixer: str, heads=("shared",) * N_AGENTS) -> ValueDecompositionCritic:
    spec = RLModuleSpec(
        module_class=ValueDecompositionCritic,
        observation_space=gym.spaces.Box(-1, 1, (STATE_DIM,)),
        action_space=gym.spaces.Discrete(2),
        model_config={
            "head_of_agent": list(heads),
            "obs_dims": [OBS_DIM] * N_AGENTS,
            "state_dim": STATE_DIM,
            "hiddens": [16],
            "activation": "tanh",
            "mixer": mixer,
            "mixer_embed_dim": 8,
            "hypernet_embed_dim": 16,
        },
    )
    return spec.build()


def random_batch(rows=64, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return {
        STATE: torch.randn(rows, STATE_DIM, generator=generator),
        AGENT_OBS: torch.randn(rows, N_AGENTS, OBS_DIM, generator=generator),
    }


def test_vdn_output_is_the_sum_of_agent_values():
    critic = make_critic("vdn")
    batch = random_batch()
    torch.testing.assert_close(critic.compute_values(batch), critic.agent_values(batch).sum(dim=1))
    assert critic.hypernetworks is None


@pytest.mark.parametrize(
    "heads",
    [("shared",) * N_AGENTS, ("a", "b", "a")],  # one call for all; groups out of agent order
)
def test_agent_values_are_each_heads_value_of_its_agents_observation(heads):
    critic = make_critic("vdn", heads=heads)
    batch = random_batch()
    one_by_one = torch.stack(
        [critic.heads[h](batch[AGENT_OBS][:, i]).squeeze(-1) for i, h in enumerate(heads)], dim=1
    )
    torch.testing.assert_close(critic.agent_values(batch), one_by_one, rtol=1e-6, atol=1e-7)


def test_qmix_is_monotonic_in_every_agent_value():
    critic = make_critic("qmix")
    batch = random_batch(rows=256, seed=1)
    agent_values = torch.randn(256, N_AGENTS, requires_grad=True)
    mixed = critic.mix(agent_values, batch)
    (gradient,) = torch.autograd.grad(mixed.sum(), agent_values)
    assert (gradient >= 0).all()
    assert (gradient > 0).any()


def test_qmix_function_literal():
    values = torch.tensor([[1.0, -2.0]])
    w1 = torch.tensor([[[1.0], [-1.0]]])
    # |w1| makes both weights 1: hidden = elu(1 * 1 + 1 * (-2) + 0.5) = elu(-0.5)
    b1 = torch.tensor([[0.5]])
    w2 = torch.tensor([[-2.0]])  # |w2| = 2
    b2 = torch.tensor([0.25])
    expected = 2.0 * (np.exp(-0.5) - 1.0) + 0.25
    assert qmix_mix(values, w1, b1, w2, b2).item() == pytest.approx(expected, rel=1e-6)
    assert qmix_hidden_preactivations(values, w1, b1).item() == pytest.approx(-0.5)
    assert vdn_mix(values).item() == pytest.approx(-1.0)


@pytest.mark.parametrize("mixer", ["vdn", "qmix"])
def test_value_loss_gradients_reach_every_agent_head(mixer):
    critic = make_critic(mixer, heads=("a", "b", "c"))
    batch = random_batch(seed=2)
    loss = torch.mean((critic.compute_values(batch) - 1.0) ** 2)
    loss.backward()
    for head in ("a", "b", "c"):
        grads = [p.grad for p in critic.heads[head].parameters()]
        assert all(g is not None for g in grads)
        assert sum(float(g.abs().sum()) for g in grads) > 0, head


@pytest.mark.parametrize("mixer", ["vdn", "qmix"])
def test_mixer_key_is_really_read(mixer):
    config = algos.vdppo(mixer=mixer).rllib_config("toy:coordination")
    critic = config.rl_module_spec.rl_module_specs[CRITIC_MODULE_ID].build()
    assert critic.mixer_name == mixer
    assert (critic.hypernetworks is not None) == (mixer == "qmix")


def test_unknown_mixer_is_an_error():
    from marllib_ext.errors import ConfigError

    with pytest.raises(ConfigError, match="config key 'mixer'"):
        algos.vdppo(mixer="qtran").rllib_config("toy:coordination")


register_env("test:vd_counter", CounterEnv, state_source="observations")
RECORDED = []


class RecordingLearner(EFXVDLearner):
    advantage_connector_class = recording(
        EFXVDJointAdvantageConnector,
        RECORDED,
        columns=(Columns.OBS, Columns.LOSS_MASK, Columns.ADVANTAGES, Columns.ACTION_LOGP),
    )


def reference_efx_vd_advantages(record, *, gamma, lambda_, coef, z_low, z_high):
    """(uid, t) -> standardized seed_dp advantage, from what the observations say
    (episode id, step, agent, normalized z) and the logged log-probs only: V_tot from the
    recorded critic on states and agent observations rebuilt from (uid, t, z), team GAE
    and ``min(A_ext[t..T], delta[T] - z[T])`` written out per chunk."""
    rows = defaultdict(list)  # (uid, t) -> [(obs, logp)] of the agents' rows
    for columns in record["modules"].values():
        for obs, logp in zip(columns[Columns.OBS], columns[Columns.ACTION_LOGP], strict=True):
            rows[(int(obs[0]), int(obs[1]))].append((obs, float(logp)))
    bootstrap = record["end_observations"]  # (uid, t) -> [obs] after each chunk's end

    def z_normalized(uid, t):
        seen = [obs for obs, _ in rows.get((uid, t), [])] + bootstrap.get((uid, t), [])
        (value,) = {float(obs[-1]) for obs in seen}  # one z per team step
        return value

    def v_tot(uid, t):
        u = z_normalized(uid, t)
        agent_obs = np.array([[uid, t, i, u] for i in range(N_COUNTER_AGENTS)], np.float32)
        state = np.append(agent_obs[:, :3].reshape(-1), u).astype(np.float32)
        with torch.no_grad():
            value = record["critic_module"].compute_values(
                {
                    STATE: torch.as_tensor(state[None]),
                    AGENT_OBS: torch.as_tensor(agent_obs[None]),
                }
            )
        return float(value[0])

    valid_steps = sorted(rows)
    by_uid = defaultdict(list)
    for uid, t in valid_steps:
        by_uid[uid].append(t)
    raw = {}
    for uid, steps in by_uid.items():
        segments, current = [], []
        for t in steps:
            current.append(t)
            if (uid, t + 1) in bootstrap:  # this chunk ends here
                segments.append(current)
                current = []
        assert not current, "every chunk ends where the record's chunks end"
        for ts in segments:
            values = [v_tot(uid, t) for t in ts]
            terminated = ts[-1] + 1 == COUNTER_EPISODE_LENGTH and uid % 2 == 1
            next_value = 0.0 if terminated else v_tot(uid, ts[-1] + 1)
            a_ext, running = {}, 0.0
            for k in range(len(ts) - 1, -1, -1):
                team_reward = sum(reward_of(uid, ts[k], i) for i in range(N_COUNTER_AGENTS))
                following = next_value if k == len(ts) - 1 else values[k + 1]
                running = (
                    team_reward
                    + gamma * following
                    - values[k]
                    + (0.0 if k == len(ts) - 1 else gamma * lambda_ * running)
                )
                a_ext[ts[k]] = running
            last = ts[-1]
            delta_last = -coef * sum(logp for _, logp in rows[(uid, last)])
            z_last = z_low + z_normalized(uid, last) * (z_high - z_low)
            slack_last = delta_last - z_last
            for k, t in enumerate(ts):
                raw[(uid, t)] = min(min(a_ext[s] for s in ts[k:]), slack_last)
    values = np.array(list(raw.values()))
    return {key: (v - values.mean()) / max(1e-4, values.std()) for key, v in raw.items()}


@pytest.mark.parametrize("share_policy", ["all", "individual"])
def test_efx_vdppo_advantages_follow_from_the_episode_data(ray_session, share_policy):
    RECORDED.clear()
    gamma, lambda_, coef, z_low, z_high = 0.9, 0.8, 0.5, -3.0, 3.0
    config = counter_config(
        "efx_vdppo",
        "test:vd_counter",
        RecordingLearner,
        share_policy,
        gamma=gamma,
        lambda_=lambda_,
        intrinsic_coef=coef,
        z_low=z_low,
        z_high=z_high,
        z_init=1.0,
        efx_advantage="seed_dp",
    )
    algorithm = config.build_algo()
    try:
        algorithm.train()
        algorithm.train()
    finally:
        algorithm.stop()
    assert RECORDED
    checked = 0
    for record in RECORDED:
        reference = reference_efx_vd_advantages(
            record, gamma=gamma, lambda_=lambda_, coef=coef, z_low=z_low, z_high=z_high
        )
        for columns in record["modules"].values():
            for obs, valid, advantage in zip(
                columns[Columns.OBS],
                columns[Columns.LOSS_MASK],
                columns[Columns.ADVANTAGES],
                strict=True,
            ):
                if valid:
                    key = (int(obs[0]), int(obs[1]))
                    assert advantage == pytest.approx(reference[key], abs=2e-4), key
                    checked += 1
    assert checked > 0


@pytest.mark.parametrize("mixer", ["vdn", "qmix"])
def test_absent_agents_enter_the_mixer_with_value_zero(mixer):
    from marllib_ext.policies.vd_critic import AGENT_PRESENT

    critic = make_critic(mixer)
    batch = random_batch(rows=8, seed=2)
    present = torch.tensor([[1.0, 0.0, 1.0]]).repeat(8, 1)
    masked = critic.compute_values({**batch, AGENT_PRESENT: present})
    values = critic.agent_values(batch)
    expected = critic.mix(values * present, batch)  # the absent agent's value is 0
    torch.testing.assert_close(masked, expected)
    if mixer == "vdn":
        torch.testing.assert_close(masked, values[:, 0] + values[:, 2])
    # Whatever the absent agent observes does not move V_tot.
    moved = {**batch, AGENT_OBS: batch[AGENT_OBS].clone()}
    moved[AGENT_OBS][:, 1] += 5.0
    torch.testing.assert_close(critic.compute_values({**moved, AGENT_PRESENT: present}), masked)
