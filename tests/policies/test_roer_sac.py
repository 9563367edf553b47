"""The SAC module's critic (``q_network``): the SAC paper's ``[s, a]`` MLP for
continuous actions against a hand computation, RLlib's multi-stream critic on request,
discrete actions untouched, targets built from the critic in use."""

import gymnasium as gym
import numpy as np
import pytest
import torch
from ray.rllib.algorithms.sac.sac_catalog import SACCatalog
from ray.rllib.core.columns import Columns
from ray.rllib.core.models.base import ENCODER_OUT
from ray.rllib.core.models.torch.encoder import TorchMultiStreamEncoder
from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
from ray.rllib.core.rl_module.rl_module import RLModuleSpec

from marllib_ext import algos
from marllib_ext.errors import ConfigError
from marllib_ext.policies.roer_sac import ConcatQEncoder, ROERSACTorchRLModule

PENDULUM_OBS = gym.spaces.Box(-8.0, 8.0, (3,), np.float32)
PENDULUM_ACTION = gym.spaces.Box(-2.0, 2.0, (1,), np.float32)


def build_module(action_space, q_network="concat", hiddens=(4,)):
    return RLModuleSpec(
        module_class=ROERSACTorchRLModule,
        catalog_class=SACCatalog,
        observation_space=PENDULUM_OBS,
        action_space=action_space,
        model_config={
            **vars(DefaultModelConfig(fcnet_hiddens=list(hiddens), fcnet_activation="relu")),
            "twin_q": True,
            "value_hiddens": list(hiddens),
            "value_activation": "relu",
            "q_network": q_network,
        },
    ).build()


def test_concat_critic_is_one_mlp_on_state_and_action():
    module = build_module(PENDULUM_ACTION)
    for encoder in (module.qf_encoder, module.qf_twin_encoder):
        assert isinstance(encoder, ConcatQEncoder)
        linears = [m for m in encoder.modules() if isinstance(m, torch.nn.Linear)]
        assert [(m.in_features, m.out_features) for m in linears] == [(4, 4)]
    obs = torch.tensor([[1.0, -2.0, 0.5], [0.0, 0.3, -1.0]])
    actions = torch.tensor([[0.7], [-1.5]])
    layer = module.qf_encoder.net[0]
    head = [m for m in module.qf.modules() if isinstance(m, torch.nn.Linear)]
    assert len(head) == 1
    by_hand = torch.relu(torch.cat([obs, actions], -1) @ layer.weight.T + layer.bias)
    by_hand = (by_hand @ head[0].weight.T + head[0].bias).squeeze(-1)
    encoded = module.qf_encoder({Columns.OBS: obs, Columns.ACTIONS: actions})[ENCODER_OUT]
    torch.testing.assert_close(module.qf(encoded).squeeze(-1), by_hand)


def test_literal_case_of_the_concat_encoder():
    encoder = ConcatQEncoder(2, 1, [2], "relu")
    with torch.no_grad():
        encoder.net[0].weight.copy_(torch.tensor([[1.0, 0.0, 1.0], [0.0, -1.0, 2.0]]))
        encoder.net[0].bias.copy_(torch.tensor([0.5, 0.0]))
    out = encoder({Columns.OBS: torch.tensor([[1.0, 2.0]]), Columns.ACTIONS: torch.tensor([[3.0]])})
    # [1 + 3 + 0.5, -2 + 6 + 0] = [4.5, 4.0]; relu keeps both.
    torch.testing.assert_close(out[ENCODER_OUT], torch.tensor([[4.5, 4.0]]))


def test_targets_copy_the_concat_critic():
    module = build_module(PENDULUM_ACTION)
    module.make_target_networks()
    assert isinstance(module.target_qf_encoder, ConcatQEncoder)
    for main, target in module.get_target_network_pairs():
        for p, tp in zip(main.parameters(), target.parameters(), strict=True):
            torch.testing.assert_close(p, tp)


def test_multi_stream_keeps_rllibs_critic():
    module = build_module(PENDULUM_ACTION, q_network="multi_stream")
    assert isinstance(module.qf_encoder, TorchMultiStreamEncoder)


def test_discrete_actions_keep_the_observation_critic():
    module = build_module(gym.spaces.Discrete(3))
    assert not isinstance(module.qf_encoder, ConcatQEncoder)
    q = module.qf(module.qf_encoder({Columns.OBS: torch.zeros(2, 3)})[ENCODER_OUT])
    assert q.shape == (2, 3)


def test_unknown_q_network_names_the_field():
    with pytest.raises(ConfigError, match="q_network"):
        algos.sac_roer(q_network="wide").settings("Pendulum-v1")


def test_the_mean_action_is_the_squashed_mean():
    module = build_module(PENDULUM_ACTION)
    dist_class = module.get_inference_action_dist_cls()
    # loc 0.5 and 3.0, log std 0: RLlib's own deterministic action would be the loc.
    dist = dist_class.from_logits(torch.tensor([[0.5, 0.0], [3.0, 0.0]]))
    action = dist.to_deterministic().sample()
    torch.testing.assert_close(action, torch.tanh(torch.tensor([[0.5], [3.0]])))
    assert float(action.abs().max()) < 1.0


def test_deterministic_episodes_act_with_the_squashed_mean(ray_session):
    """A whole episode with ``explore=False``: every action the episode records (the
    module's, before RLlib scales it to Pendulum's [-2, 2]) is ``tanh`` of the mean."""
    config = algos.sac_roer(hiddens=[8], per_type="uniform").rllib_config("Pendulum-v1", seed=0)
    algorithm = config.build_algo()
    try:
        module = algorithm.env_runner.module
        with torch.no_grad():  # a mean far outside [-1, 1] before the squash
            module.pi.net.mlp[-1].bias.copy_(torch.tensor([5.0, 0.0]))
        episodes = algorithm.env_runner.sample(num_episodes=1, explore=False, force_reset=True)
        actions = np.concatenate([np.asarray(e.get_actions()) for e in episodes])
        obs = np.concatenate([np.asarray(e.get_observations()[:-1]) for e in episodes])
        with torch.no_grad():
            inputs = module.forward_inference({Columns.OBS: torch.as_tensor(obs)})
            mean = inputs[Columns.ACTION_DIST_INPUTS][:, :1]
        np.testing.assert_allclose(actions, torch.tanh(mean).numpy(), atol=1e-5)
    finally:
        algorithm.stop()
