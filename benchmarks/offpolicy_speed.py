"""Seconds per SAC gradient update of ``sac_roer`` against the same update as a plain
torch loop, measured in one run on one thread::

    python benchmarks/offpolicy_speed.py --updates 200

Rows (every one with its env steps, one env step per update, on Pendulum-v1):

- ``plain torch loop``: actor, twin Q and alpha (the nets of ``_sac.yaml``: 256x256
  ReLU), batch 256, uniform draws from numpy arrays, one Adam step per loss and a soft
  target update per step; the env stepped once per update with the actor's sample.
- ``sac_roer`` with ``fast_replay`` (the transition store, K minibatches per learner
  call; ``--fragment`` env steps per training step, so K = fragment) for ``per_type``
  uniform and JS, and with RLlib's episode buffers (``fast_replay=false``, one update
  per env step).

Also peak resident memory of the process (``ru_maxrss``) at the end.
"""

from __future__ import annotations

import argparse
import resource
import time

import gymnasium as gym
import numpy as np
import ray
import torch
from torch import nn

from marllib_ext import algos


def mlp(inputs: int, outputs: int, hiddens: list[int]) -> nn.Sequential:
    layers, width = [], inputs
    for hidden in hiddens:
        layers += [nn.Linear(width, hidden), nn.ReLU()]
        width = hidden
    return nn.Sequential(*layers, nn.Linear(width, outputs))


def plain_loop_seconds(updates: int, batch: int, hiddens: list[int], seed: int = 0) -> float:
    """Seconds per update of a plain torch SAC loop (with its env step)."""
    torch.manual_seed(seed)
    env = gym.make("Pendulum-v1")
    obs_dim, act_dim = env.observation_space.shape[0], env.action_space.shape[0]
    actor = mlp(obs_dim, 2 * act_dim, hiddens)
    q1, q2 = mlp(obs_dim + act_dim, 1, hiddens), mlp(obs_dim + act_dim, 1, hiddens)
    q1_target, q2_target = mlp(obs_dim + act_dim, 1, hiddens), mlp(obs_dim + act_dim, 1, hiddens)
    q1_target.load_state_dict(q1.state_dict())
    q2_target.load_state_dict(q2.state_dict())
    log_alpha = torch.zeros(1, requires_grad=True)
    actor_opt = torch.optim.Adam(actor.parameters(), 3e-4)
    critic_opt = torch.optim.Adam([*q1.parameters(), *q2.parameters()], 3e-4)
    alpha_opt = torch.optim.Adam([log_alpha], 3e-4)
    capacity = 100_000
    store = {
        "obs": np.zeros((capacity, obs_dim), np.float32),
        "next": np.zeros((capacity, obs_dim), np.float32),
        "act": np.zeros((capacity, act_dim), np.float32),
        "rew": np.zeros(capacity, np.float32),
        "done": np.zeros(capacity, np.float32),
    }
    rng = np.random.default_rng(seed)

    def policy(obs):
        mean, log_std = actor(obs).chunk(2, -1)
        dist = torch.distributions.Normal(mean, log_std.clamp(-20, 2).exp())
        raw = dist.rsample()
        action = torch.tanh(raw)
        logp = (dist.log_prob(raw) - torch.log(1 - action.pow(2) + 1e-6)).sum(-1)
        return action, logp

    obs, _ = env.reset(seed=seed)
    held = 0
    for _ in range(batch):  # a first batch of random transitions
        action = env.action_space.sample()
        nxt, reward, terminated, truncated, _ = env.step(action)
        for name, value in zip(store, (obs, nxt, action, reward, terminated), strict=True):
            store[name][held] = value
        held += 1
        obs = nxt if not (terminated or truncated) else env.reset()[0]
    start = time.perf_counter()
    for _ in range(updates):
        with torch.no_grad():
            action = policy(torch.as_tensor(obs)[None])[0][0].numpy()
        nxt, reward, terminated, truncated, _ = env.step(2.0 * action)
        for name, value in zip(store, (obs, nxt, action, reward, terminated), strict=True):
            store[name][held % capacity] = value
        held += 1
        obs = nxt if not (terminated or truncated) else env.reset()[0]
        rows = rng.integers(0, min(held, capacity), batch)
        o, n, a, r, d = (torch.from_numpy(store[k][rows]) for k in store)
        alpha = log_alpha.exp().detach()
        with torch.no_grad():
            next_action, next_logp = policy(n)
            next_in = torch.cat([n, next_action], -1)
            next_q = torch.min(q1_target(next_in), q2_target(next_in)).squeeze(-1)
            target = r + 0.99 * (1 - d) * (next_q - alpha * next_logp)
        taken = torch.cat([o, a], -1)
        critic_loss = (q1(taken).squeeze(-1) - target).pow(2).mean() + (
            q2(taken).squeeze(-1) - target
        ).pow(2).mean()
        critic_opt.zero_grad()
        critic_loss.backward()
        critic_opt.step()
        new_action, logp = policy(o)
        new_in = torch.cat([o, new_action], -1)
        actor_loss = (alpha * logp - torch.min(q1(new_in), q2(new_in)).squeeze(-1)).mean()
        actor_opt.zero_grad()
        actor_loss.backward()
        actor_opt.step()
        alpha_loss = -(log_alpha * (logp.detach() - act_dim)).mean()
        alpha_opt.zero_grad()
        alpha_loss.backward()
        alpha_opt.step()
        with torch.no_grad():
            for main, target_net in ((q1, q1_target), (q2, q2_target)):
                for p, tp in zip(main.parameters(), target_net.parameters(), strict=True):
                    tp.mul_(0.995).add_(0.005 * p)
    return (time.perf_counter() - start) / updates


def sac_roer_seconds(updates: int, fragment: int, **settings) -> float:
    """Seconds per update of ``sac_roer`` (training steps with their env steps)."""
    config = algos.sac_roer(
        num_steps_sampled_before_learning_starts=256, rollout_fragment_length=fragment, **settings
    ).rllib_config("Pendulum-v1", seed=0)
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--updates", type=int, default=200)
    parser.add_argument("--fragment", type=int, default=32, help="env steps per training step")
    args = parser.parse_args()
    torch.set_num_threads(1)
    ray.init(num_cpus=2, include_dashboard=False, configure_logging=False, log_to_driver=False)
    plain = plain_loop_seconds(args.updates, 256, [256, 256])
    rows = [("plain torch loop", plain)]
    for per_type in ("uniform", "JS"):
        rows.append((
            f"`sac_roer` fast_replay, {per_type}, K = {args.fragment}",
            sac_roer_seconds(args.updates, args.fragment, per_type=per_type),
        ))  # fmt: skip
    rows.append((
        "`sac_roer` RLlib buffers (fast_replay=false), JS",
        sac_roer_seconds(args.updates // 4, 1, per_type="JS", fast_replay=False),
    ))  # fmt: skip
    print("| update path | ms per update (with its env step) | / plain loop |")
    print("|---|---|---|")
    for name, seconds in rows:
        print(f"| {name} | {1000 * seconds:.1f} | {seconds / plain:.2f} |")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"\npeak resident memory of this process: {peak:.0f} MiB")
    ray.shutdown()


if __name__ == "__main__":
    main()
