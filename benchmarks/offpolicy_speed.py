"""Seconds per gradient update of ``sac_roer``, ``isac_roer``, ``qmix`` (feed-forward,
and GRU agents with TD(lambda) targets), ``maddpg``, ``masac`` and ``hasac``
against the same update as a plain torch loop, measured in one run on one thread::

    python benchmarks/offpolicy_speed.py --updates 256 --team-updates 40

Every row includes the env steps its update earns (SAC: one; the team algorithms: one
25-step episode). Each plain loop uses the algorithm's nets and settings with numpy
transitions and uniform draws (``PlainSAC``, ``qmix_plain_loop_seconds``,
``maddpg_plain_loop_seconds``, ``soft_team_plain_loop_seconds``). ``sac_roer`` runs
on Pendulum-v1 with ``fast_replay`` (K = ``--fragment`` minibatches per learner call,
and K = 1) for ``per_type`` uniform and JS, and on RLlib's episode buffers
(``fast_replay=false``); ``isac_roer``, ``maddpg``, ``masac`` and ``hasac`` on
continuous ``mpe:simple_spread``, ``qmix`` on the discrete one.

Also env steps per second of each path and the peak resident memory of the process
(``ru_maxrss``).
"""

from __future__ import annotations

import copy
import resource
import time

import common
import gymnasium as gym
import numpy as np
import ray
import torch

from marllib_ext import algos, make_env
from marllib_ext.policies.joint_critic import mlp as mlp_net
from marllib_ext.policies.vd_critic import QMixHypernetworks


class PlainSAC:
    """SAC's update as a plain torch loop: actor, twin Q and alpha (the nets of
    ``_sac.yaml``: 256x256 ReLU, the critic on ``[s, a]``), one Adam step per loss and a
    soft target update per step; actions squashed to ``[low, high]``."""

    def __init__(self, obs_dim: int, act_dim: int, hiddens: list[int], low, high) -> None:
        self.act_dim = act_dim
        self.low, self.high = torch.as_tensor(low), torch.as_tensor(high)
        self.actor = mlp_net(obs_dim, hiddens, 2 * act_dim, "relu")
        self.q1 = mlp_net(obs_dim + act_dim, hiddens, 1, "relu")
        self.q2 = mlp_net(obs_dim + act_dim, hiddens, 1, "relu")
        self.q1_target, self.q2_target = copy.deepcopy(self.q1), copy.deepcopy(self.q2)
        self.log_alpha = torch.zeros(1, requires_grad=True)
        self.actor_opt = torch.optim.Adam(self.actor.parameters(), 3e-4)
        self.critic_opt = torch.optim.Adam([*self.q1.parameters(), *self.q2.parameters()], 3e-4)
        self.alpha_opt = torch.optim.Adam([self.log_alpha], 3e-4)

    def policy(self, obs):
        """A squashed sample in ``[-1, 1]`` and its log-probability."""
        mean, log_std = self.actor(obs).chunk(2, -1)
        dist = torch.distributions.Normal(mean, log_std.clamp(-20, 2).exp())
        raw = dist.rsample()
        action = torch.tanh(raw)
        logp = (dist.log_prob(raw) - torch.log(1 - action.pow(2) + 1e-6)).sum(-1)
        return action, logp

    def act(self, obs: np.ndarray) -> np.ndarray:
        """Env actions for ``(k, d)`` observations."""
        with torch.no_grad():
            action = self.policy(torch.as_tensor(obs, dtype=torch.float32))[0]
        return (self.low + (action + 1.0) * 0.5 * (self.high - self.low)).numpy()

    def update(self, o, a, r, n, d) -> None:
        """One gradient step on a batch (``a`` in ``[-1, 1]``)."""
        alpha = self.log_alpha.exp().detach()
        with torch.no_grad():
            next_action, next_logp = self.policy(n)
            next_in = torch.cat([n, next_action], -1)
            next_q = torch.min(self.q1_target(next_in), self.q2_target(next_in)).squeeze(-1)
            target = r + 0.99 * (1 - d) * (next_q - alpha * next_logp)
        taken = torch.cat([o, a], -1)
        critic_loss = (self.q1(taken).squeeze(-1) - target).pow(2).mean() + (
            self.q2(taken).squeeze(-1) - target
        ).pow(2).mean()
        self.critic_opt.zero_grad()
        critic_loss.backward()
        self.critic_opt.step()
        new_action, logp = self.policy(o)
        new_in = torch.cat([o, new_action], -1)
        actor_loss = (alpha * logp - torch.min(self.q1(new_in), self.q2(new_in)).squeeze(-1)).mean()
        self.actor_opt.zero_grad()
        actor_loss.backward()
        self.actor_opt.step()
        alpha_loss = -(self.log_alpha * (logp.detach() - self.act_dim)).mean()
        self.alpha_opt.zero_grad()
        alpha_loss.backward()
        self.alpha_opt.step()
        with torch.no_grad():
            for main, target_net in ((self.q1, self.q1_target), (self.q2, self.q2_target)):
                for p, tp in zip(main.parameters(), target_net.parameters(), strict=True):
                    tp.mul_(0.995).add_(0.005 * p)


class PlainTransitions:
    """Uniform replay of single transitions in numpy arrays (actions in ``[-1, 1]``)."""

    def __init__(self, capacity: int, obs_dim: int, act_dim: int) -> None:
        self.capacity, self.held = capacity, 0
        self.arrays = {
            "obs": np.zeros((capacity, obs_dim), np.float32),
            "act": np.zeros((capacity, act_dim), np.float32),
            "rew": np.zeros(capacity, np.float32),
            "next": np.zeros((capacity, obs_dim), np.float32),
            "done": np.zeros(capacity, np.float32),
        }

    def add(self, obs, act, rew, nxt, done) -> None:
        """``k`` rows at once (every argument ``(k, ...)``)."""
        rows = (self.held + np.arange(len(obs))) % self.capacity
        for name, value in zip(self.arrays, (obs, act, rew, nxt, done), strict=True):
            self.arrays[name][rows] = value
        self.held += len(obs)

    def sample(self, rows: int, rng) -> list[torch.Tensor]:
        drawn = rng.integers(0, min(self.held, self.capacity), rows)
        return [torch.from_numpy(array[drawn]) for array in self.arrays.values()]


def plain_loop_seconds(updates: int, batch: int, hiddens: list[int], seed: int = 0) -> float:
    """Seconds per update of a plain torch SAC loop on Pendulum-v1 (with its env step)."""
    torch.manual_seed(seed)
    env = gym.make("Pendulum-v1")
    space = env.action_space
    sac = PlainSAC(env.observation_space.shape[0], space.shape[0], hiddens, space.low, space.high)
    store = PlainTransitions(100_000, env.observation_space.shape[0], space.shape[0])
    rng = np.random.default_rng(seed)
    obs, _ = env.reset(seed=seed)

    def step(action) -> None:
        nonlocal obs
        nxt, reward, terminated, truncated, _ = env.step(action)
        unit = 2 * (action - space.low) / (space.high - space.low) - 1
        store.add(obs[None], unit[None], [reward], nxt[None], [float(terminated)])
        obs = nxt if not (terminated or truncated) else env.reset()[0]

    for _ in range(batch):  # a first batch of random transitions
        step(space.sample())
    start = time.perf_counter()
    for _ in range(updates):
        step(sac.act(obs[None])[0])
        sac.update(*store.sample(batch, rng))
    return (time.perf_counter() - start) / updates


def isac_plain_loop_seconds(updates: int, batch: int, hiddens: list[int], seed: int = 0) -> float:
    """Seconds per update of a plain torch SAC loop on continuous mpe:simple_spread with
    one policy for the three agents (``isac_roer``'s ``share_policy=all``): every env step
    stores each agent's transition and earns one update."""
    torch.manual_seed(seed)
    env, agents, obs_dim, _ = spread_env(continuous=True)
    space = env.action_space(agents[0])
    sac = PlainSAC(obs_dim, space.shape[0], hiddens, space.low, space.high)
    store = PlainTransitions(100_000, obs_dim, space.shape[0])
    rng = np.random.default_rng(seed)
    obs, _ = env.reset(seed=seed)

    def step(actions: np.ndarray) -> None:
        nonlocal obs
        stacked = np.stack([obs[a] for a in agents])
        nxt, rewards, terminated, _, _ = env.step(dict(zip(agents, actions, strict=True)))
        unit = 2 * (actions - space.low) / (space.high - space.low) - 1
        done = [float(terminated[a]) for a in agents]
        store.add(
            stacked, unit, [rewards[a] for a in agents], np.stack([nxt[a] for a in agents]), done
        )
        obs = nxt if env.agents else env.reset(seed=int(rng.integers(1 << 30)))[0]

    for _ in range(batch):
        step(np.stack([space.sample() for _ in agents]))
    start = time.perf_counter()
    for _ in range(updates):
        step(sac.act(np.stack([obs[a] for a in agents])))
        sac.update(*store.sample(batch, rng))
    return (time.perf_counter() - start) / updates


def roer_seconds(name: str, env, updates: int, fragment: int, **settings) -> float:
    """Seconds per update of ``sac_roer`` / ``isac_roer`` (training steps with their env
    steps; one update per env step)."""
    config = algos.get(
        name, num_steps_sampled_before_learning_starts=256, rollout_fragment_length=fragment,
        **settings,
    ).rllib_config(env, seed=0)  # fmt: skip
    algorithm = config.build_algo()
    try:
        while (
            algorithm.metrics.peek(("env_runners", "num_env_steps_sampled_lifetime"), default=0)
            < 512
        ):
            algorithm.training_step()  # fill past the learning start, warm up
        steps = max(1, updates // fragment)
        start = time.perf_counter()
        for _ in range(steps):
            algorithm.training_step()
        return (time.perf_counter() - start) / (steps * fragment)
    finally:
        algorithm.stop()


class TeamTransitions:
    """A plain ring of team transitions for the plain MARL loops: ``(n, d)``
    observations now and next, ``(s,)`` states now and next, ``(n, ...)`` actions, the
    team reward and the termination flag."""

    def __init__(self, capacity: int, n: int, obs_dim: int, state_dim: int, action_shape):
        self.capacity, self.held = capacity, 0
        self.arrays = {
            "obs": np.zeros((capacity, n, obs_dim), np.float32),
            "next": np.zeros((capacity, n, obs_dim), np.float32),
            "state": np.zeros((capacity, state_dim), np.float32),
            "next_state": np.zeros((capacity, state_dim), np.float32),
            "act": np.zeros((capacity, n, *action_shape), np.float32),
            "rew": np.zeros(capacity, np.float32),
            "done": np.zeros(capacity, np.float32),
        }

    def play_episode(self, env, agents, choose, rng) -> None:
        """One episode of ``env`` acting with ``choose((n, d) observations)``."""
        obs, _ = env.reset(seed=int(rng.integers(1 << 30)))
        state = env.state()
        while env.agents:
            stacked = np.stack([obs[a] for a in agents])
            actions = choose(stacked)
            nxt, rewards, terminated, _, _ = env.step(dict(zip(agents, actions, strict=True)))
            next_state = env.state()
            row = self.held % self.capacity
            for name, value in (
                ("obs", stacked), ("next", np.stack([nxt[a] for a in agents])),
                ("state", state), ("next_state", next_state), ("act", actions),
                ("rew", sum(rewards.values())), ("done", float(any(terminated.values()))),
            ):  # fmt: skip
                self.arrays[name][row] = value
            self.held += 1
            obs, state = nxt, next_state

    def sample(self, rows: int, rng) -> list[torch.Tensor]:
        drawn = rng.integers(0, min(self.held, self.capacity), rows)
        return [torch.from_numpy(array[drawn]) for array in self.arrays.values()]


def spread_env(continuous: bool):
    """mpe:simple_spread as the plain loops see it: env, agents, sizes."""
    from marllib_ext.envs import make_parallel_env

    env = make_parallel_env("mpe:simple_spread", continuous_actions=continuous)
    obs, _ = env.reset(seed=0)
    agents = sorted(obs)
    return env, agents, obs[agents[0]].shape[0], env.state().shape[0]


def qmix_plain_loop_seconds(updates: int, seed: int = 0) -> float:
    """Seconds per update of a plain torch QMIX loop on mpe:simple_spread, each with
    the episode it earns (``training_intensity`` 1): the package's own agent MLP and
    QMIX hypernetworks, one shared agent network, transitions in numpy arrays,
    ``batch_episode`` x 25 uniform draws, double-Q targets, standardized rewards,
    RMSprop and a gradient clip of 10, a hard target copy every 200 episodes."""
    torch.manual_seed(seed)
    settings = algos.qmix().settings(make_env("mpe:simple_spread"))
    env, agents, obs_dim, state_dim = spread_env(continuous=False)
    n, n_actions = len(agents), env.action_space(agents[0]).n
    agent = mlp_net(obs_dim, settings.hiddens, n_actions, settings.activation)
    mixer = QMixHypernetworks(state_dim, n, settings.mixer_embed_dim, settings.hypernet_embed_dim)
    target_agent, target_mixer = copy.deepcopy(agent), copy.deepcopy(mixer)
    params = [*agent.parameters(), *mixer.parameters()]
    optimizer = torch.optim.RMSprop(params, lr=settings.lr, alpha=0.99, eps=1e-5)
    store = TeamTransitions(settings.buffer_size * 25, n, obs_dim, state_dim, ())
    rng = np.random.default_rng(seed)

    def epsilon_greedy(epsilon: float):
        def choose(stacked: np.ndarray) -> np.ndarray:
            with torch.no_grad():
                greedy = agent(torch.from_numpy(stacked)).argmax(-1).numpy()
            return np.where(rng.random(n) < epsilon, rng.integers(0, n_actions, n), greedy)

        return choose

    for _ in range(settings.episodes_before_learning):
        store.play_episode(env, agents, epsilon_greedy(1.0), rng)
    start = time.perf_counter()
    for update in range(updates):
        store.play_episode(env, agents, epsilon_greedy(0.05), rng)
        o, nx, st, nst, a, r, d = store.sample(settings.batch_episode * 25, rng)
        r = (r - r.mean()) / (r.std() + 1e-8)
        chosen = agent(o).gather(-1, a.long().unsqueeze(-1)).squeeze(-1)  # (B, n)
        with torch.no_grad():
            best = agent(nx).argmax(-1, keepdim=True)
            next_values = target_agent(nx).gather(-1, best).squeeze(-1)
            target = r + settings.gamma * (1 - d) * target_mixer(next_values, nst)
        loss = (mixer(chosen, st) - target).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, settings.grad_clip)
        optimizer.step()
        if (update + 1) % settings.target_network_update_freq == 0:
            target_agent.load_state_dict(agent.state_dict())
            target_mixer.load_state_dict(mixer.state_dict())
    return (time.perf_counter() - start) / updates


def qmix_gru_plain_loop_seconds(updates: int, seed: int = 0, lam: float = 0.6) -> float:
    """Seconds per update of a plain torch QMIX loop with pymarl2's agent and target:
    the GRU agent (``fc -> GRUCell -> fc``, ``rnn_hidden_dim``) unrolled over
    ``batch_episode`` whole 25-step episodes of mpe:simple_spread held as numpy arrays,
    double-Q values from the target agent, TD(lambda) targets over each episode (time
    limits only: ``G_t = r_t + gamma ((1 - lambda) Q_{t+1} + lambda G_{t+1})``,
    ``G_{T-1} = r + gamma Q_T``), the settings' optimizer and clip, one update per
    episode played, a hard target copy every 200 episodes."""
    torch.manual_seed(seed)
    settings = algos.qmix(use_rnn=True, td_lambda=lam).settings(make_env("mpe:simple_spread"))
    env, agents, obs_dim, state_dim = spread_env(continuous=False)
    n, n_actions, hidden = len(agents), env.action_space(agents[0]).n, settings.rnn_hidden_dim
    encoder = torch.nn.Sequential(torch.nn.Linear(obs_dim, hidden), torch.nn.ReLU())
    gru, head = torch.nn.GRUCell(hidden, hidden), torch.nn.Linear(hidden, n_actions)
    agent = torch.nn.ModuleList([encoder, gru, head])
    mixer = QMixHypernetworks(state_dim, n, settings.mixer_embed_dim, settings.hypernet_embed_dim)
    target_agent, target_mixer = copy.deepcopy(agent), copy.deepcopy(mixer)
    params = [*agent.parameters(), *mixer.parameters()]
    optimizer = torch.optim.RMSprop(params, lr=settings.lr, alpha=0.99, eps=1e-5)
    steps, capacity = 25, settings.buffer_size
    store = {
        "obs": np.zeros((capacity, steps + 1, n, obs_dim), np.float32),
        "state": np.zeros((capacity, steps + 1, state_dim), np.float32),
        "act": np.zeros((capacity, steps, n), np.int64),
        "rew": np.zeros((capacity, steps), np.float32),
    }
    rng, held = np.random.default_rng(seed), 0

    def unroll(net, obs):  # (B, L + 1, n, d) -> (B, L + 1, n, A)
        b = obs.shape[0]
        h = obs.new_zeros(b * n, hidden)
        out = []
        for t in range(obs.shape[1]):
            h = net[1](net[0](obs[:, t].reshape(b * n, -1)), h)
            out.append(net[2](h).reshape(b, n, -1))
        return torch.stack(out, 1)

    def mix(net, values, states):  # (B, L, n), (B, L, s) -> (B, L)
        b, length = values.shape[:2]
        return net(values.reshape(b * length, n), states.reshape(b * length, -1)).reshape(b, -1)

    def play(epsilon: float) -> None:
        nonlocal held
        row = held % capacity
        obs, _ = env.reset(seed=int(rng.integers(1 << 30)))
        h = torch.zeros(n, hidden)
        for t in range(steps):
            stacked = np.stack([obs[a] for a in agents])
            store["obs"][row, t], store["state"][row, t] = stacked, env.state()
            with torch.no_grad():
                h = gru(encoder(torch.from_numpy(stacked)), h)
                greedy = head(h).argmax(-1).numpy()
            actions = np.where(rng.random(n) < epsilon, rng.integers(0, n_actions, n), greedy)
            obs, rewards, _, _, _ = env.step(dict(zip(agents, actions, strict=True)))
            store["act"][row, t], store["rew"][row, t] = actions, sum(rewards.values())
        store["obs"][row, steps] = np.stack([obs[a] for a in agents])
        store["state"][row, steps] = env.state()
        held += 1

    for _ in range(settings.episodes_before_learning):
        play(1.0)
    start = time.perf_counter()
    for update in range(updates):
        play(0.05)
        drawn = rng.integers(0, min(held, capacity), settings.batch_episode)
        o, st, a, r = (torch.from_numpy(store[k][drawn]) for k in ("obs", "state", "act", "rew"))
        r = (r - r.mean()) / (r.std() + 1e-8)
        q = unroll(agent, o)
        chosen = q[:, :-1].gather(-1, a.unsqueeze(-1)).squeeze(-1)  # (B, L, n)
        with torch.no_grad():
            best = q[:, 1:].argmax(-1, keepdim=True)
            next_values = unroll(target_agent, o)[:, 1:].gather(-1, best).squeeze(-1)
            next_total = mix(target_mixer, next_values, st[:, 1:])  # (B, L)
            targets = torch.zeros_like(r)
            running = next_total[:, -1]
            for t in reversed(range(steps)):
                if t < steps - 1:
                    running = (1 - lam) * next_total[:, t] + lam * targets[:, t + 1]
                targets[:, t] = r[:, t] + settings.gamma * running
        loss = (mix(mixer, chosen, st[:, :-1]) - targets).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, settings.grad_clip)
        optimizer.step()
        if (update + 1) % settings.target_network_update_freq == 0:
            target_agent.load_state_dict(agent.state_dict())
            target_mixer.load_state_dict(mixer.state_dict())
    return (time.perf_counter() - start) / updates


def maddpg_plain_loop_seconds(updates: int, seed: int = 0) -> float:
    """Seconds per update of a plain torch MADDPG loop on continuous mpe:simple_spread,
    each with the episode it earns: one shared actor ``mu(o)`` and one central critic
    ``Q(s, a_1..a_n)`` (the package's MLP sizes), Gaussian exploration noise, numpy
    transitions, ``batch_episode`` x 25 uniform draws, the critic's TD step on the
    team reward, then every agent's actor term through its own action (the others'
    from the batch), Adam, a gradient clip of 10 and Polyak targets."""
    torch.manual_seed(seed)
    settings = algos.maddpg().settings(make_env("mpe:simple_spread", continuous_actions=True))
    env, agents, obs_dim, state_dim = spread_env(continuous=True)
    n, space = len(agents), env.action_space(agents[0])
    act_dim = space.shape[0]
    low, high = torch.as_tensor(space.low), torch.as_tensor(space.high)
    actor = mlp_net(obs_dim, settings.actor_hiddens, act_dim, settings.activation)
    critic = mlp_net(state_dim + n * act_dim, settings.critic_hiddens, 1, settings.activation)
    target_actor, target_critic = copy.deepcopy(actor), copy.deepcopy(critic)
    actor_opt = torch.optim.Adam(actor.parameters(), settings.actor_lr)
    critic_opt = torch.optim.Adam(critic.parameters(), settings.critic_lr)
    store = TeamTransitions(settings.buffer_size * 25, n, obs_dim, state_dim, (act_dim,))
    rng = np.random.default_rng(seed)

    def mu(net, obs):
        return low + (torch.tanh(net(obs)) + 1.0) * 0.5 * (high - low)

    def noisy(stacked: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            action = mu(actor, torch.from_numpy(stacked))
        noise = settings.exploration_noise * 0.5 * (high - low) * torch.randn_like(action)
        return torch.maximum(torch.minimum(action + noise, high), low).numpy()

    def q(net, state, joint):  # (B, s), (B, ..., n, a) -> (B, ...)
        state = state.view(state.shape[0], *[1] * (joint.dim() - 3), -1)
        state = state.expand(*joint.shape[:-2], -1)
        return net(torch.cat([state, joint.flatten(-2)], -1)).squeeze(-1)

    own = torch.eye(n).view(1, n, n, 1)  # row i: agent i's own action replaced
    for _ in range(settings.learning_starts):
        store.play_episode(env, agents, noisy, rng)
    start = time.perf_counter()
    for _ in range(updates):
        store.play_episode(env, agents, noisy, rng)
        o, nx, st, nst, a, r, d = store.sample(settings.batch_episode * 25, rng)
        with torch.no_grad():
            target = r + settings.gamma * (1 - d) * q(target_critic, nst, mu(target_actor, nx))
        critic_loss = (q(critic, st, a) - target).pow(2).mean()
        critic_opt.zero_grad()
        critic_loss.backward()
        torch.nn.utils.clip_grad_norm_(critic.parameters(), settings.grad_clip)
        critic_opt.step()
        current = mu(actor, o)  # (B, n, a)
        joint = own * current.unsqueeze(1) + (1 - own) * a.unsqueeze(1)  # (B, n, n, a)
        actor_loss = -q(critic, st, joint).mean()
        actor_opt.zero_grad()
        actor_loss.backward()
        torch.nn.utils.clip_grad_norm_(actor.parameters(), settings.grad_clip)
        actor_opt.step()
        with torch.no_grad():
            for main, target_net in ((actor, target_actor), (critic, target_critic)):
                for p, tp in zip(main.parameters(), target_net.parameters(), strict=True):
                    tp.lerp_(p, settings.tau)
    return (time.perf_counter() - start) / updates


def soft_team_plain_loop_seconds(updates: int, *, sequential: bool, seed: int = 0) -> float:
    """Seconds per update of a plain torch MASAC (``sequential``: HASAC) loop on
    continuous mpe:simple_spread, each with the episode it earns: squashed-Gaussian
    actors (one shared; HASAC one per agent, stepped one after another in a random order
    on the joint action of the agents already stepped), one twin soft critic
    ``Q(s, a_1..a_n)`` on the team reward, tuned temperatures (HASAC's team one in the
    target), numpy transitions, ``batch_episode`` x 25 uniform draws, Adam, a gradient
    clip of 10 and Polyak targets."""
    torch.manual_seed(seed)
    name = "hasac" if sequential else "masac"
    settings = algos.get(name).settings(make_env("mpe:simple_spread", continuous_actions=True))
    env, agents, obs_dim, state_dim = spread_env(continuous=True)
    n, space = len(agents), env.action_space(agents[0])
    act_dim = space.shape[0]
    low, high = torch.as_tensor(space.low), torch.as_tensor(space.high)
    hiddens, activation = settings.actor_hiddens, settings.activation
    actors = [
        mlp_net(obs_dim, hiddens, 2 * act_dim, activation) for _ in range(n if sequential else 1)
    ]
    critics = [
        mlp_net(state_dim + n * act_dim, settings.critic_hiddens, 1, activation) for _ in range(2)
    ]
    targets = copy.deepcopy(critics)
    log_alphas = [torch.zeros((), requires_grad=True) for _ in range(len(actors) + sequential)]
    actor_opts = [torch.optim.Adam(a.parameters(), settings.actor_lr) for a in actors]
    critic_opt = torch.optim.Adam([p for c in critics for p in c.parameters()], settings.critic_lr)
    alpha_opt = torch.optim.Adam(log_alphas, settings.alpha_lr)
    store = TeamTransitions(settings.buffer_size * 25, n, obs_dim, state_dim, (act_dim,))
    rng = np.random.default_rng(seed)
    half = 0.5 * (high - low)

    def policy(i, obs):  # (B, d) -> action (B, a), log pi (B,)
        mean, log_std = actors[i % len(actors)](obs).chunk(2, -1)
        std = log_std.clamp(-20, 2).exp()
        u = mean + std * torch.randn_like(mean)
        logp = torch.distributions.Normal(mean, std).log_prob(u)
        logp = logp - 2 * (np.log(2) - u - torch.nn.functional.softplus(-2 * u)) - half.log()
        return low + (torch.tanh(u) + 1) * half, logp.sum(-1)

    def sample(stacked: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            obs = torch.from_numpy(stacked)
            return torch.stack([policy(i, obs[i : i + 1])[0][0] for i in range(n)]).numpy()

    def q_min(nets, state, joint):
        x = torch.cat([state, joint.flatten(1)], -1)
        return torch.minimum(nets[0](x), nets[1](x)).squeeze(-1)

    for _ in range(settings.learning_starts):
        store.play_episode(env, agents, sample, rng)
    start = time.perf_counter()
    for _ in range(updates):
        store.play_episode(env, agents, sample, rng)
        o, nx, st, nst, a, r, d = store.sample(settings.batch_episode * 25, rng)
        with torch.no_grad():
            drawn = [policy(i, nx[:, i]) for i in range(n)]
            joint_next = torch.stack([x for x, _ in drawn], 1)
            alphas = [log_alphas[-1 if sequential else i % len(actors)].exp() for i in range(n)]
            penalty = sum(alphas[i] * drawn[i][1] for i in range(n))
            y = r + settings.gamma * (1 - d) * (q_min(targets, nst, joint_next) - penalty)
        x = torch.cat([st, a.flatten(1)], -1)
        critic_loss = 0.5 * sum((c(x).squeeze(-1) - y).pow(2).mean() for c in critics)
        critic_opt.zero_grad()
        critic_loss.backward()
        torch.nn.utils.clip_grad_norm_([p for c in critics for p in c.parameters()], 10.0)
        critic_opt.step()
        for c in critics:
            c.requires_grad_(False)
        entropy_terms = []
        if sequential:
            with torch.no_grad():
                joint = [policy(i, o[:, i])[0] for i in range(n)]
            for i in rng.permutation(n):
                action, logp = policy(i, o[:, i])
                together = torch.stack([*joint[:i], action, *joint[i + 1 :]], 1)
                loss = (log_alphas[i].exp().detach() * logp - q_min(critics, st, together)).mean()
                actor_opts[i].zero_grad()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(actors[i].parameters(), 10.0)
                actor_opts[i].step()
                entropy_terms.append((i, logp.detach()))
                with torch.no_grad():
                    joint[i] = policy(i, o[:, i])[0]
        else:
            drawn = [policy(i, o[:, i]) for i in range(n)]
            q = q_min(critics, st, torch.stack([x for x, _ in drawn], 1))
            loss = -q.mean() + sum(log_alphas[0].exp().detach() * lp.mean() for _, lp in drawn)
            actor_opts[0].zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(actors[0].parameters(), 10.0)
            actor_opts[0].step()
            entropy_terms = [(i, lp.detach()) for i, (_, lp) in enumerate(drawn)]
        for c in critics:
            c.requires_grad_(True)
        alpha_loss = sum(
            -(log_alphas[i % len(actors)] * (lp + settings.target_entropy_of(True, act_dim))).mean()
            for i, lp in entropy_terms
        )
        if sequential:
            joint_logp = sum(lp for _, lp in entropy_terms)
            entropy = n * settings.target_entropy_of(True, act_dim)
            alpha_loss = alpha_loss - (log_alphas[-1] * (joint_logp + entropy)).mean()
        alpha_opt.zero_grad()
        alpha_loss.backward()
        alpha_opt.step()
        with torch.no_grad():
            for main, target_net in zip(critics, targets, strict=True):
                for p, tp in zip(main.parameters(), target_net.parameters(), strict=True):
                    tp.lerp_(p, settings.tau)
    return (time.perf_counter() - start) / updates


def team_replay_seconds(name: str, updates: int, env, **settings) -> float:
    """Seconds per update of a team-replay algorithm (its training steps, with the
    episodes they sample: one update per sampled episode)."""
    share = "individual" if name == "hasac" else "all"
    algorithm = (
        algos.get(name, **settings).rllib_config(env, share_policy=share, seed=0).build_algo()
    )
    try:
        settings = algorithm.replay_settings
        while len(algorithm.store) < settings.episodes_before_learning + 8:
            algorithm.training_step()  # fill past the learning start, warm up
        done, start = 0, time.perf_counter()
        while done < updates:
            algorithm.training_step()
            done += int(algorithm.metrics.peek(("team_replay", "updates"), default=0))
        return (time.perf_counter() - start) / done
    finally:
        algorithm.stop()


def main() -> None:
    parser = common.parser(__doc__)
    parser.add_argument("--updates", type=int, default=200)
    parser.add_argument("--team-updates", type=int, default=40)
    parser.add_argument("--fragment", type=int, default=32, help="env steps per training step")
    parser.add_argument("--algorithms", nargs="+", help="sections to run (default: all)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    common.start_ray(num_cpus=2)
    spread = make_env("mpe:simple_spread")
    continuous_spread = make_env("mpe:simple_spread", continuous_actions=True)
    k = args.fragment
    # algorithm -> () -> (its plain loop's seconds, [(path, seconds)], env steps per update)
    sections = {
        "sac_roer": lambda: (plain_loop_seconds(args.updates, 256, [256, 256]), [
            (f"fast_replay, uniform, K = {k}",
             roer_seconds("sac_roer", "Pendulum-v1", args.updates, k, per_type="uniform")),
            (f"fast_replay, JS, K = {k}",
             roer_seconds("sac_roer", "Pendulum-v1", args.updates, k, per_type="JS")),
            ("fast_replay, JS, K = 1 (the YAML's rollout_fragment_length)",
             roer_seconds("sac_roer", "Pendulum-v1", args.updates // 2, 1, per_type="JS")),
            ("RLlib buffers (fast_replay=false), JS, K = 1",
             roer_seconds("sac_roer", "Pendulum-v1", args.updates // 4, 1, per_type="JS",
                          fast_replay=False)),
        ], 1),
        "isac_roer": lambda: (isac_plain_loop_seconds(args.updates, 256, [256, 256]), [
            (f"fast_replay, JS, K = {k}",
             roer_seconds("isac_roer", continuous_spread, args.updates, k, per_type="JS")),
        ], 1),
        "qmix": lambda: (qmix_plain_loop_seconds(args.team_updates), [
            ("team store, uniform", team_replay_seconds("qmix", args.team_updates, spread)),
        ], 25),
        "qmix_gru_td_lambda": lambda: (qmix_gru_plain_loop_seconds(args.team_updates), [
            ("team store, uniform, GRU agents, TD(0.6)", team_replay_seconds(
                "qmix", args.team_updates, spread, use_rnn=True, td_lambda=0.6)),
        ], 25),
        "maddpg": lambda: (maddpg_plain_loop_seconds(args.team_updates), [
            ("team store, uniform",
             team_replay_seconds("maddpg", args.team_updates, continuous_spread)),
        ], 25),
        "masac": lambda: (soft_team_plain_loop_seconds(args.team_updates, sequential=False), [
            ("team store, uniform",
             team_replay_seconds("masac", args.team_updates, continuous_spread)),
        ], 25),
        "hasac": lambda: (soft_team_plain_loop_seconds(args.team_updates, sequential=True), [
            ("team store, uniform, one actor per agent",
             team_replay_seconds("hasac", args.team_updates, continuous_spread)),
        ], 25),
    }  # fmt: skip
    chosen = args.algorithms or list(sections)
    unknown = sorted(set(chosen) - set(sections))
    if unknown:
        parser.error(f"unknown --algorithms {unknown}; known: {sorted(sections)}")
    print("| algorithm | update path | ms per update (with its env steps) | / its plain loop "
          "| env steps/s |")  # fmt: skip
    print("|---|---|---|---|---|")
    for name in chosen:
        plain, rows, env_steps = sections[name]()
        for path, seconds in [("plain torch loop", plain), *rows]:
            print(
                f"| `{name}` | {path} | {1000 * seconds:.1f} | {seconds / plain:.2f} | "
                f"{env_steps / seconds:.0f} |"
            )
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"\npeak resident memory of this process: {peak:.0f} MiB")
    ray.shutdown()


if __name__ == "__main__":
    main()
