"""What the joint-advantage tests share: a connector that records what it wrote, and
the reference team advantages computed from the observations alone (episode id, step,
agent) of ``tests.helpers.CounterEnv``-style envs."""

import copy
from collections import defaultdict

import numpy as np
import torch
from ray.rllib.core.columns import Columns

from marllib_ext.policies import STATE
from marllib_ext.policies.joint_critic import is_critic_module
from marllib_ext.rollout.episode_steps import observed_steps
from tests.helpers import EPISODE_LENGTH, N_AGENTS, reward_of

GAMMA, LAMBDA = 0.9, 0.8
COLUMNS = (Columns.OBS, Columns.LOSS_MASK, Columns.ADVANTAGES, Columns.VALUE_TARGETS)


def critic_values(critic, method: str = "compute_values"):
    """``states -> values`` of a (copied) joint critic's ``method``."""

    def compute(states):
        batch = {STATE: torch.as_tensor(states, dtype=torch.float32)}
        return getattr(critic, method)(batch).detach().numpy()

    return compute


def recording(connector_class, records: list, columns=COLUMNS, critics=None, extra=None):
    """A ``connector_class`` that appends, per call, ``{"critic_module_id", "modules":
    {actor: {column: array}}, "critic_module": copy, <key>: critic_values(copy,
    method) for key, method in critics, **extra(connector, batch)}`` to ``records``.
    ``extra`` runs before the connector (state it reads, such as a multiplier) and
    returns a function of the written batch."""
    critics = critics or {"critic": "compute_values"}

    class Recording(connector_class):
        def __call__(self, *, rl_module, batch, episodes, **kwargs):
            finish = extra(self) if extra else (lambda batch: {})
            ends = chunk_ends(episodes)
            last_observations = end_observations(episodes)
            batch = super().__call__(rl_module=rl_module, batch=batch, episodes=episodes, **kwargs)
            critic = copy.deepcopy(rl_module[self.critic_module_id])  # weights as used here
            actors = [m for m in batch if not is_critic_module(m)]
            records.append(
                {
                    "critic_module_id": self.critic_module_id,
                    "modules": {
                        mid: {c: batch[mid][c].detach().cpu().numpy() for c in columns}
                        for mid in (self.actor_module_ids or actors)
                        if mid in batch
                    },
                    "critic_module": critic,
                    "chunk_ends": ends,
                    "end_observations": last_observations,
                    **{key: critic_values(critic, method) for key, method in critics.items()},
                    **finish(batch),
                }
            )
            return batch

    return Recording


def chunk_ends(episodes) -> set[tuple[int, int]]:
    """``(uid, t)`` just after each chunk's last env step, from its agents' first
    observation ``(uid, t, ...)`` (CounterEnv-style observations)."""
    ends = set()
    for chunk in episodes:
        for sa_episode in chunk.agent_episodes.values():
            if len(sa_episode):
                obs = np.asarray(sa_episode.get_observations(0))
                obs = obs if obs.ndim == 1 else obs.ravel()
                ends.add((int(obs[0]), int(chunk.env_t)))
                break
    return ends


def end_observations(episodes) -> dict[tuple[int, int], list[np.ndarray]]:
    """``(uid, t)`` just after each chunk's last env step -> the observations there of
    the agents that observed it (the state a chunk's GAE bootstraps on)."""
    out = {}
    for chunk in episodes:
        for agent, sa_episode in chunk.agent_episodes.items():
            observed = observed_steps(chunk, agent)
            if observed and observed[-1][0] == chunk.env_t - chunk.env_t_started:
                obs = np.asarray(sa_episode.get_observations(observed[-1][1])).ravel()
                out.setdefault((int(obs[0]), int(obs[1])), []).append(obs)
    return out


def reference_team_advantages(record, reward_fn=reward_of, critic_key="critic"):
    """(uid, t) -> normalized team advantage, from obs-decoded identities only.

    ``reward_fn(uid, t, agent)`` is the per-agent signal summed into the team's;
    ``record[critic_key]`` maps states to the values the GAE runs on."""
    ends = record["chunk_ends"]
    valid_steps = set()
    for columns in record["modules"].values():
        for uid, t, _ in columns[Columns.OBS]:
            valid_steps.add((int(uid), int(t)))

    def state(uid, t):
        return np.concatenate([[uid, t, i] for i in range(N_AGENTS)])

    by_uid = defaultdict(list)
    for uid, t in sorted(valid_steps):
        by_uid[uid].append(t)
    advantages = {}
    for uid, steps in by_uid.items():
        # Split into chunks at the bootstrap rows (chunk end = next t is a bootstrap row).
        segments, current = [], []
        for t in steps:
            current.append(t)
            if (uid, t + 1) in ends:
                segments.append(current)
                current = []
        assert not current, "every chunk ends in the record's chunk ends"
        for segment in segments:
            ts = np.array(segment)
            values = record[critic_key](np.stack([state(uid, t) for t in ts]))
            bootstrap = record[critic_key](state(uid, ts[-1] + 1)[None])[0]
            terminated = ts[-1] + 1 == EPISODE_LENGTH and uid % 2 == 1
            running = 0.0
            for k in range(len(ts) - 1, -1, -1):
                team_reward = sum(reward_fn(uid, ts[k], i) for i in range(N_AGENTS))
                if k == len(ts) - 1:
                    next_value = 0.0 if terminated else bootstrap
                    running = team_reward + GAMMA * next_value - values[k]
                else:
                    delta = team_reward + GAMMA * values[k + 1] - values[k]
                    running = delta + GAMMA * LAMBDA * running
                advantages[(uid, int(ts[k]))] = running
    raw = np.array(list(advantages.values()))
    return {key: (value - raw.mean()) / max(1e-4, raw.std()) for key, value in advantages.items()}


def reference_present_agents(record, acts, terminal_step):
    """``(uid, t) -> (standardized team advantage, value target)`` for three agents that
    come and go: ``acts(uid, t, agent)`` says who acts at each step (an agent observes
    where it acts and at the step after its last action; absent agents' state slots are
    zeros), the team reward is the acting agents' rewards, chunks end at ``agent_0``'s
    bootstrap rows (it plays throughout) and odd uids end terminated at
    ``terminal_step(uid)``."""

    def observes(uid, t, agent):
        return acts(uid, t, agent) or (t > 0 and acts(uid, t - 1, agent))

    def state(uid, t):
        return np.concatenate(
            [[uid, t, i] if observes(uid, t, i) else [0.0, 0.0, 0.0] for i in range(3)]
        )

    chunk_ends = record["chunk_ends"]
    steps = set()
    for columns in record["modules"].values():
        for uid, t, _ in columns[Columns.OBS]:
            steps.add((int(uid), int(t)))
    by_uid = defaultdict(list)
    for uid, t in sorted(steps):
        by_uid[uid].append(t)
    advantages, targets = {}, {}
    for uid, ts in by_uid.items():
        segments, current = [], []
        for t in ts:
            current.append(t)
            if (uid, t + 1) in chunk_ends:
                segments.append(current)
                current = []
        assert not current
        for segment in segments:
            ts_ = np.array(segment)
            values = record["critic"](np.stack([state(uid, t) for t in ts_]))
            bootstrap = record["critic"](state(uid, ts_[-1] + 1)[None])[0]
            terminated = uid % 2 == 1 and ts_[-1] == terminal_step(uid)
            running = 0.0
            for k in range(len(ts_) - 1, -1, -1):
                t = int(ts_[k])
                reward = sum(reward_of(uid, t, i) for i in range(3) if acts(uid, t, i))
                if k == len(ts_) - 1:
                    running = reward + GAMMA * (0.0 if terminated else bootstrap) - values[k]
                else:
                    delta = reward + GAMMA * values[k + 1] - values[k]
                    running = delta + GAMMA * LAMBDA * running
                advantages[(uid, t)] = running
                targets[(uid, t)] = running + values[k]
    raw = np.array(list(advantages.values()))
    return {
        key: ((value - raw.mean()) / max(1e-4, raw.std()), targets[key])
        for key, value in advantages.items()
    }
