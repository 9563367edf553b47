"""CNN actors on grid observations (``encoder: cnn``): the flat observation rebuilt as
its grid, the forward pass against a slow loop-by-loop reference, masks, and the
settings and envs the encoder refuses."""

import gymnasium as gym
import numpy as np
import pytest
import torch
from ray.rllib.algorithms.ppo.ppo_catalog import PPOCatalog
from ray.rllib.core.columns import Columns
from ray.rllib.core.rl_module.rl_module import RLModuleSpec
from torch import nn

from marllib_ext import algos, make_env
from marllib_ext.envs.adapter import ACTION_MASK_KEY, OBSERVATION_KEY
from marllib_ext.envs.grid_space import GridBox, grid_shape_of
from marllib_ext.errors import ConfigError
from marllib_ext.ops.masks import MASKED_LOGIT
from marllib_ext.policies.grid_actor import GridPPOActor, MaskedGridPPOActor
from marllib_ext.policies.masked_actor import masked_actor_class
from marllib_ext.policies.recurrent import recurrent_model_config
from marllib_ext.rllib_compat.recurrent import RecurrentPPOCatalog

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

GRID = (4, 5, 3)
MODEL = {
    "conv_filters": [[4, 3, 1], [6, 3, 2]],
    "conv_activation": "relu",
    "head_fcnet_hiddens": [8],
    "head_fcnet_activation": "relu",
    "vf_share_layers": False,  # as the package's actors: the value head has its own CNN
}


def _actor(cls=GridPPOActor, space=None):
    return RLModuleSpec(
        module_class=cls,
        observation_space=space or GridBox(GRID),
        action_space=gym.spaces.Discrete(5),
        model_config=dict(MODEL),
        catalog_class=PPOCatalog,
    ).build()


def _slow_cnn(layers, grid: np.ndarray) -> np.ndarray:
    """Conv layers by loops: zero padding, each convolution as sums over channels and
    kernel cells, ReLU, then flattened in (H, W, C) order (RLlib's CNN returns channels
    last)."""
    x = grid.transpose(2, 0, 1).astype(np.float64)  # (C, H, W)
    for layer in layers:
        if isinstance(layer, nn.ZeroPad2d):
            left, right, top, bottom = layer.padding
            x = np.pad(x, ((0, 0), (top, bottom), (left, right)))
        elif isinstance(layer, nn.Conv2d):
            w = layer.weight.detach().double().numpy()
            b = layer.bias.detach().double().numpy()
            (kh, kw), (sh, sw) = layer.kernel_size, layer.stride
            rows, cols = (x.shape[1] - kh) // sh + 1, (x.shape[2] - kw) // sw + 1
            out = np.zeros((w.shape[0], rows, cols))
            for o in range(w.shape[0]):
                for i in range(rows):
                    for j in range(cols):
                        patch = x[:, i * sh : i * sh + kh, j * sw : j * sw + kw]
                        out[o, i, j] = float((patch * w[o]).sum()) + b[o]
            x = out
        elif isinstance(layer, nn.ReLU):
            x = np.maximum(x, 0.0)
    return x.transpose(1, 2, 0).reshape(-1)


def _slow_mlp(layers, h: np.ndarray) -> np.ndarray:
    for layer in layers:
        if isinstance(layer, nn.Linear):
            h = layer.weight.detach().double().numpy() @ h + layer.bias.detach().double().numpy()
        elif isinstance(layer, nn.ReLU):
            h = np.maximum(h, 0.0)
    return h


def _slow_logits(actor, grid: np.ndarray) -> np.ndarray:
    """The pi head's logits by loops: the actor's CNN, then its head."""
    return _slow_mlp(actor.pi.net.mlp, _slow_cnn(actor.encoder.actor_encoder.net[0].cnn, grid))


def test_a_gridbox_is_a_flat_box_that_knows_its_grid():
    space = GridBox(GRID)
    assert space.shape == (60,) and space.dtype == np.float32
    assert grid_shape_of(space) == GRID
    assert grid_shape_of(gym.spaces.Box(0, 1, (60,))) is None
    with pytest.raises(ValueError, match="grid shape"):
        GridBox((4, 5))


def test_the_cnn_reads_the_flattened_grid_as_the_slow_reference_does():
    torch.manual_seed(0)
    actor = _actor()
    assert any(isinstance(m, nn.Conv2d) for m in actor.modules())
    grids = np.random.default_rng(0).normal(size=(3, *GRID)).astype(np.float32)
    flat = torch.from_numpy(grids.reshape(3, -1))  # the env's np.ravel order
    logits = actor.forward_inference({Columns.OBS: flat})[Columns.ACTION_DIST_INPUTS]
    for k in range(3):
        np.testing.assert_allclose(logits[k].detach().numpy(), _slow_logits(actor, grids[k]),
                                   rtol=1e-5, atol=1e-6)  # fmt: skip
    # Read in another order the same numbers are another image: the reference disagrees.
    shuffled = grids.transpose(0, 2, 1, 3).reshape(3, -1)
    other = actor.forward_inference({Columns.OBS: torch.from_numpy(shuffled.copy())})
    assert not np.allclose(other[Columns.ACTION_DIST_INPUTS][0].detach().numpy(),
                           _slow_logits(actor, grids[0]), atol=1e-4)  # fmt: skip
    values = actor.compute_values({Columns.OBS: flat})
    assert values.shape == (3,)


def _slow_gru(gru: nn.GRU, x: np.ndarray, h: np.ndarray) -> np.ndarray:
    """One GRU step by its equations (torch's gate order r, z, n):
    r = sig(W_ir x + b_ir + W_hr h + b_hr), z likewise, n = tanh(W_in x + b_in +
    r * (W_hn h + b_hn)), h' = (1 - z) n + z h."""
    w_ih, w_hh = (gru.weight_ih_l0.detach().double().numpy(),
                  gru.weight_hh_l0.detach().double().numpy())  # fmt: skip
    b_ih, b_hh = gru.bias_ih_l0.detach().double().numpy(), gru.bias_hh_l0.detach().double().numpy()
    gi, gh = w_ih @ x + b_ih, w_hh @ h + b_hh
    size = h.shape[0]
    sig = lambda v: 1.0 / (1.0 + np.exp(-v))  # noqa: E731
    r = sig(gi[:size] + gh[:size])
    z = sig(gi[size : 2 * size] + gh[size : 2 * size])
    n = np.tanh(gi[2 * size :] + r * gh[2 * size :])
    return (1.0 - z) * n + z * h


def test_the_recurrent_grid_actor_runs_its_cnn_then_its_gru_step_by_step():
    """``encoder: cnn`` with ``use_rnn``: each step's grid goes through the conv layers,
    the GRU carries its state across the sequence, the heads read the GRU's output;
    a (B, T) training sequence equals the slow step-by-step reference."""
    torch.manual_seed(0)
    actor = RLModuleSpec(
        module_class=GridPPOActor,
        observation_space=GridBox(GRID),
        action_space=gym.spaces.Discrete(5),
        model_config={**MODEL, **recurrent_model_config("gru", 7, 4)},
        catalog_class=RecurrentPPOCatalog,
    ).build()
    assert actor.is_stateful()
    encoder = actor.encoder.actor_encoder
    batch, steps = 2, 4
    grids = np.random.default_rng(1).normal(size=(batch, steps, *GRID)).astype(np.float32)
    h0 = np.random.default_rng(2).normal(size=(batch, 7)).astype(np.float32)
    state = {k: {"h": torch.from_numpy(h0)[:, None]} for k in ("actor", "critic")}
    out = actor.forward_train(
        {Columns.OBS: torch.from_numpy(grids.reshape(batch, steps, -1)), Columns.STATE_IN: state}
    )
    logits = out[Columns.ACTION_DIST_INPUTS].detach().numpy()
    assert logits.shape == (batch, steps, 5)
    for b in range(batch):
        h = h0[b].astype(np.float64)
        for t in range(steps):
            features = _slow_cnn(encoder.tokenizer.net[0].cnn, grids[b, t])
            h = _slow_gru(encoder.gru, features, h)
            np.testing.assert_allclose(logits[b, t], _slow_mlp(actor.pi.net.mlp, h),
                                       rtol=1e-4, atol=1e-5)  # fmt: skip
        np.testing.assert_allclose(
            out[Columns.STATE_OUT]["actor"]["h"][b, 0].detach().numpy(), h, rtol=1e-4, atol=1e-5
        )


def test_masks_still_hold_on_the_grid_actor():
    assert masked_actor_class(GridPPOActor) is MaskedGridPPOActor
    space = gym.spaces.Dict(
        {OBSERVATION_KEY: GridBox(GRID), ACTION_MASK_KEY: gym.spaces.Box(0, 1, (5,))}
    )
    actor = _actor(MaskedGridPPOActor, space)
    mask = torch.tensor([[1.0, 0, 1, 0, 0], [0, 0, 0, 0, 1]])
    obs = {OBSERVATION_KEY: torch.randn(2, 60), ACTION_MASK_KEY: mask}
    logits = actor.forward_inference({Columns.OBS: obs})[Columns.ACTION_DIST_INPUTS]
    assert torch.all(logits[mask == 0] == MASKED_LOGIT)
    assert torch.all(logits[mask == 1] > MASKED_LOGIT)


@pytest.mark.parametrize(
    ("algo", "env", "settings", "message"),
    [
        ("ippo", "mpe:simple_spread", {"encoder": "cnn"}, "needs grid observations"),
        ("ippo", "mpe:simple_spread", {"encoder": "vit"}, "encoder"),
        ("ippo", "mpe:simple_spread", {"conv_filters": [[32, 3]]}, "conv_filters"),
    ],
)
def test_settings_and_envs_the_encoder_refuses(algo, env, settings, message):
    with pytest.raises(ConfigError, match=message):
        algos.get(algo, **settings).rllib_config(make_env(env), seed=0)


def test_the_joint_critic_stacks_every_agents_grid_along_the_channels():
    """A 1x1 convolution with the identity as its kernel hands the stacked image back:
    at each cell, agent 0's C channels, then agent 1's."""
    from marllib_ext.policies.joint_critic import GridStackEncoder, same_padding

    n, (h, w, c) = 2, GRID
    encoder = GridStackEncoder((n, h, w, c), [[n * c, 1, 1]], "relu")
    conv = encoder.cnn[1]
    with torch.no_grad():
        conv.weight.copy_(torch.eye(n * c).reshape(n * c, n * c, 1, 1))
        conv.bias.zero_()
    grids = np.random.default_rng(1).uniform(size=(3, n, h, w, c)).astype(np.float32)
    state = torch.from_numpy(grids.reshape(3, -1))  # agent 0's flat grid, then agent 1's
    stacked = np.concatenate([grids[:, 0], grids[:, 1]], axis=-1)  # (3, H, W, 2C)
    np.testing.assert_allclose(encoder(state).detach().numpy(), stacked.reshape(3, -1), rtol=1e-6)
    assert encoder.out_dim == h * w * n * c
    # "Same" padding: the output keeps ceil(size / stride) cells, the odd cell after.
    assert same_padding(5, 3, 1) == (1, 1, 5) and same_padding(5, 3, 2) == (1, 1, 3)
    assert same_padding(4, 3, 2) == (0, 1, 2) and same_padding(4, 4, 1) == (1, 2, 4)


def _slow_cnn_value(net, grid: np.ndarray) -> float:
    """A grid value net (``joint_critic.grid_value_net`` on one agent's grid) by loops."""
    return float(_slow_mlp(net[1], _slow_cnn(net[0].cnn, grid))[0])


def test_the_vd_critic_heads_read_each_agents_grid_as_the_slow_reference_does():
    """``encoder: cnn`` on the value-decomposition critic: each head a CNN on its
    agent's own grid; VDN's V_tot is the sum of the loop-by-loop values."""
    from marllib_ext.policies.vd_critic import AGENT_OBS, ValueDecompositionCritic

    h, w, c = GRID
    critic = RLModuleSpec(
        module_class=ValueDecompositionCritic,
        learner_only=True,
        observation_space=gym.spaces.Box(-1, 1, (2 * h * w * c,)),
        action_space=gym.spaces.Discrete(5),
        model_config={
            "head_of_agent": ["agent_0", "agent_1"],
            "obs_dims": [h * w * c] * 2,
            "state_dim": 2 * h * w * c,
            "hiddens": [8],
            "activation": "relu",
            "mixer": "vdn",
            "mixer_embed_dim": 4,
            "hypernet_embed_dim": 4,
            "agent_grids": [list(GRID)] * 2,
            "conv_filters": MODEL["conv_filters"],
        },
    ).build()
    assert all(
        any(isinstance(m, nn.Conv2d) for m in head.modules()) for head in critic.heads.values()
    )
    grids = np.random.default_rng(3).uniform(size=(3, 2, h, w, c)).astype(np.float32)
    batch = {AGENT_OBS: torch.from_numpy(grids.reshape(3, 2, -1))}
    values = critic.agent_values(batch).detach().numpy()
    slow = np.array(
        [
            [_slow_cnn_value(critic.heads[f"agent_{i}"], grids[r, i]) for i in range(2)]
            for r in range(3)
        ]
    )
    np.testing.assert_allclose(values, slow, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(
        critic.compute_values(batch).detach().numpy(), slow.sum(1), rtol=1e-4, atol=1e-5
    )


@pytest.mark.parametrize("use_rnn", [False, True])
def test_joint_q_agents_read_the_grid_through_conv_layers(use_rnn):
    """``encoder: cnn`` on a joint-Q agent: its Q-values are the loop-by-loop CNN, then
    its layers (feed-forward), or the CNN then its GRU input layer (GRU agent)."""
    from marllib_ext.policies.q_agent import QAgentRLModule

    agent = RLModuleSpec(
        module_class=QAgentRLModule,
        observation_space=GridBox(GRID),
        action_space=gym.spaces.Discrete(5),
        model_config={
            "hiddens": [8],
            "activation": "relu",
            "use_rnn": use_rnn,
            "rnn_hidden_dim": 6,
            "epsilon_start": 1.0,
            "epsilon_end": 0.05,
            "epsilon_timesteps": 10,
            "grid": list(GRID),
            "conv_filters": MODEL["conv_filters"],
        },
    ).build()
    grids = np.random.default_rng(4).uniform(size=(2, 3, *GRID)).astype(np.float32)
    obs = torch.from_numpy(grids.reshape(2, 3, -1))
    if not use_rnn:
        q = agent.q_sequence(obs).detach().numpy()
        slow = [
            [_slow_mlp(agent.net[1], _slow_cnn(agent.net[0].cnn, g)) for g in row] for row in grids
        ]
        np.testing.assert_allclose(q, np.array(slow), rtol=1e-4, atol=1e-5)
        return
    features = agent.encoder(obs).detach().numpy()  # the GRU's inputs, step by step
    slow = [
        [_slow_mlp(agent.encoder[1:], _slow_cnn(agent.encoder[0].cnn, g)) for g in row]
        for row in grids
    ]
    np.testing.assert_allclose(features, np.array(slow), rtol=1e-4, atol=1e-5)
    assert agent.q_sequence(obs).shape == (2, 3, 5)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"encoder": "cnn"}, "needs grid observations"),
        ({"encoder": "cnn", "obs_agent_id": True}, "obs_agent_id"),
        ({"encoder": "cnn", "conv_filters": [[8, 3]]}, "conv_filters"),
    ],
)
def test_joint_q_refuses_what_the_encoder_cannot_read(settings, message):
    with pytest.raises(ConfigError, match=message):
        algos.qmix(**settings).rllib_config(make_env("mpe:simple_spread"), seed=0)
