"""Seconds per joint-Q GRU unroll of a replayed batch, padded against unrolled in time
segments over the sequences still running (``QAgentRLModule.q_sequence`` without and
with ``lengths``), measured in one run on one torch thread (``--threads N``: N):

    python benchmarks/gru_unroll_speed.py

One unroll is what a `qmix@pymarl2` update runs on its agents: the online network's
forward and backward and the target network's forward, on 128 episodes x 3 agents
(384 sequences) of `smax:3m`-sized inputs (fc 64, GRU 64, 9 actions). Episode lengths
are drawn from the lengths of the first 600 episodes a `qmix@pymarl2` run on `3m`
stored (``LENGTHS_3M``, recorded on this package); the second batch adds three long
battles (61, 58 and 45 steps), as later stores hold. Prints the ratio of each batch.
"""

from __future__ import annotations

import time

import common
import numpy as np
import torch
from gymnasium import spaces

from marllib_ext.ops.sequences import unroll_segments
from marllib_ext.policies import q_agent
from marllib_ext.policies.q_agent import QAgentRLModule

# episode length -> count among the first 600 episodes of `qmix@pymarl2` on smax:3m
LENGTHS_3M = {
    11: 1, 12: 8, 13: 14, 14: 32, 15: 66, 16: 90, 17: 93, 18: 85, 19: 74, 20: 45, 21: 31,
    22: 22, 23: 11, 24: 6, 25: 5, 26: 5, 28: 1, 29: 2, 30: 2, 31: 2, 32: 1, 33: 1, 34: 2,
    35: 1,
}  # fmt: skip
OBS_DIM, HIDDEN, ACTIONS, AGENTS = 45, 64, 9, 3


def agent_network() -> QAgentRLModule:
    return QAgentRLModule(
        observation_space=spaces.Box(-1.0, 1.0, (OBS_DIM,), np.float32),
        action_space=spaces.Discrete(ACTIONS),
        model_config={
            "use_rnn": True, "rnn_hidden_dim": HIDDEN, "activation": "relu",
            "hiddens": [HIDDEN], "epsilon_start": 1.0, "epsilon_end": 0.05,
            "epsilon_timesteps": 1,
        },
    )  # fmt: skip


def unroll_seconds(online, target, obs, lengths, repeats: int) -> float:
    def once():
        q = online.q_sequence(obs, lengths)
        with torch.no_grad():
            target.q_sequence(obs, lengths)
        q.square().mean().backward()

    for _ in range(3):
        once()
    start = time.perf_counter()
    for _ in range(repeats):
        once()
    return (time.perf_counter() - start) / repeats


def main() -> None:
    parser = common.parser(__doc__)
    parser.add_argument("--episodes", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    values, counts = zip(*LENGTHS_3M.items(), strict=True)
    episodes = rng.choice(values, size=args.episodes, p=np.array(counts) / sum(counts))
    online, target = agent_network(), agent_network()
    print(
        "| batch | observed steps: max, real share | segments | padded ms | segmented ms | ratio |"
    )
    print("|---|---|---|---|---|---|")
    for label, extra in (("3m lengths", []), ("3m lengths + 61, 58, 45", [61, 58, 45])):
        lengths_ep = np.concatenate([episodes[: args.episodes - len(extra)], extra]) + 1
        lengths = torch.as_tensor(np.repeat(lengths_ep, AGENTS))  # every agent's sequence
        steps = int(lengths.max())
        obs = torch.randn(len(lengths), steps, OBS_DIM)
        real = float((lengths.sum() / (len(lengths) * steps)).item())
        segments = unroll_segments(
            np.sort(lengths.numpy())[::-1], steps, q_agent.UNROLL_SEGMENT_COST
        )
        padded = unroll_seconds(online, target, obs, None, args.repeats)
        segmented = unroll_seconds(online, target, obs, lengths, args.repeats)
        print(
            f"| {label} | {steps}, {real:.2f} | {len(segments)} | {padded * 1e3:.1f} | "
            f"{segmented * 1e3:.1f} | {segmented / padded:.2f} |"
        )


if __name__ == "__main__":
    main()
