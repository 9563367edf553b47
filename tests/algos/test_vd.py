"""Value decomposition: mixers, gradients, the mixer key, and efx_vdppo's advantages."""

import copy

import gymnasium as gym
import numpy as np
import pytest
import torch
from ray.rllib.core.columns import Columns
from ray.rllib.core.rl_module.rl_module import RLModuleSpec

from marllib_ext import algos
from marllib_ext.algos.efx import EFXVDJointAdvantageConnector, EFXVDLearner
from marllib_ext.envs import register_env
from marllib_ext.ops.advantages import team_gae
from marllib_ext.ops.efx import conservative_advantage
from marllib_ext.ops.mixers import qmix_mix, vdn_mix
from marllib_ext.policies import AGENT_OBS, CRITIC_MODULE_ID, STATE, ValueDecompositionCritic
from marllib_ext.postprocessing.budget_input import BudgetInput
from tests.helpers import CounterEnv, counter_config

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


class RecordingConnector(EFXVDJointAdvantageConnector):
    def __call__(self, *, rl_module, batch, episodes, **kwargs):
        self._critic_copy = copy.deepcopy(rl_module[CRITIC_MODULE_ID])
        return super().__call__(rl_module=rl_module, batch=batch, episodes=episodes, **kwargs)

    def adjust_before_standardizing(self, team, advantages, metrics):
        out = super().adjust_before_standardizing(team, advantages, metrics)
        RECORDED.append(
            {
                "team": team,
                "final": out,
                "critic": self._critic_copy,
                "inputs": self.critic_batch(team),
            }
        )
        return out


class RecordingLearner(EFXVDLearner):
    advantage_connector_class = RecordingConnector


@pytest.mark.parametrize("share_policy", ["all", "individual"])
def test_efx_vdppo_advantages_equal_the_ops_reference(ray_session, share_policy):
    RECORDED.clear()
    gamma, lambda_, coef = 0.9, 0.8, 0.5
    config = counter_config(
        "efx_vdppo",
        "test:vd_counter",
        RecordingLearner,
        share_policy,
        gamma=gamma,
        lambda_=lambda_,
        intrinsic_coef=coef,
        z_low=-3.0,
        z_high=3.0,
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
    for record in RECORDED:
        team, layout = record["team"], record["team"].layout
        inputs = {k: torch.as_tensor(v) for k, v in record["inputs"].items()}
        # The critic input holds each agent's own (z-augmented) observation.
        for mid, cols in team.module_columns.items():
            np.testing.assert_array_equal(
                record["inputs"][AGENT_OBS][layout.team_row_of[mid], layout.agent_index_of[mid]],
                cols[Columns.OBS],
            )
        with torch.no_grad():
            values = record["critic"].compute_values(inputs).numpy().astype(np.float64)
        valid = np.flatnonzero(team.valid)
        a_ext, _ = team_gae(
            team.rewards[valid],
            values[valid],
            values[valid + 1],
            team.terminateds[valid],
            team.truncateds[valid],
            gamma=gamma,
            lambda_=lambda_,
        )
        logp = layout.gather_sum(
            {m: c[Columns.ACTION_LOGP] for m, c in team.module_columns.items()}
        )
        z = np.zeros(layout.n_rows)
        for mid, cols in team.module_columns.items():
            z[layout.team_row_of[mid]] = BudgetInput(-3.0, 3.0).read(cols[Columns.OBS])
        reference = conservative_advantage(
            a_ext, -coef * logp[valid], z[valid], (team.terminateds | team.truncateds)[valid]
        )
        np.testing.assert_allclose(record["final"][valid], reference, rtol=1e-4, atol=1e-4)
