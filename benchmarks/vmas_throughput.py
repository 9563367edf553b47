"""VMAS sampling speed: the batched rollout path (`rollout.ArrayRollout`) against raw VMAS
at the same batch size, against RLlib's per-world path over the same batched simulator,
and against RLlib's own vector env (N one-world simulators), all in one run; then
`mappo` training end to end with BenchMARL's MAPPO batch settings.

Sampling: a `mappo` env runner in the driver samples with its policy (forward pass,
action sampling, episode building included); env steps count every world's step.

    python benchmarks/vmas_throughput.py --task navigation --num-envs 40 400 --steps 40000

With `--benchmarl-python` (the interpreter of an environment with BenchMARL 1.5.2, whose
torchrl pins another torch) it instead runs BenchMARL's MAPPO and then `marllib-ext
train mappo` one after the other, end to end on the last `--num-envs`, each with its own
defaults and only the batch given: `--frames` env steps per iteration, `--epochs`
passes in minibatches of `--minibatch` frames (BenchMARL's `on_policy_n_minibatch_iters`
is its epochs), `--iterations` timed after a warm-up:

    python -m venv /tmp/benchmarl && /tmp/benchmarl/bin/pip install benchmarl==1.5.2 \
        vmas torch==2.13.0 "torchvision==0.28.*"
    python benchmarks/vmas_throughput.py --num-envs 400 --torch-threads 0 \
        --benchmarl-python /tmp/benchmarl/bin/python

BenchMARL's minibatch counts frames (every agent of a frame); this package's counts each
module's rows, so `mappo`'s shared actor is given both the literal number (3x the steps,
each a third of the rows) and the frames' agent rows. BenchMARL's MLPs are 256 x 256,
this package's 128 x 128: one more row trains `mappo` with 256 x 256 networks.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import common
import ray
import torch

from marllib_ext import algos, make_env
from marllib_ext.algos.config import MODULE_MINIBATCHES
from marllib_ext.envs.vmas import VMAS_TASKS


def raw_vmas_steps_per_second(task: str, num_envs: int, steps: int, seed: int = 0) -> float:
    """VMAS's own batched step with uniformly random continuous actions."""
    import vmas

    args = dict(VMAS_TASKS[task])
    max_steps = args.pop("max_steps")
    env = vmas.make_env(
        task, num_envs=num_envs, device="cpu", continuous_actions=True, max_steps=max_steps,
        seed=seed, dict_spaces=True, clamp_actions=True, terminated_truncated=True, **args,
    )  # fmt: skip
    generator = torch.Generator().manual_seed(seed)

    def run(calls: int) -> None:
        for _ in range(calls):
            actions = {
                a.name: torch.rand(num_envs, 2, generator=generator) * 2 - 1 for a in env.agents
            }
            _, _, terminated, truncated, _ = env.step(actions)
            ended = terminated | truncated
            if ended.all():  # as TorchRL's VmasEnv: one reset call when every world ended
                env.reset()
            else:
                for index in torch.nonzero(ended).flatten().tolist():
                    env.reset_at(index)

    env.reset()
    run(20)  # warm-up
    calls = max(1, steps // num_envs)
    start = time.perf_counter()
    run(calls)
    return calls * num_envs / (time.perf_counter() - start)


def _algorithm(env_name: str, num_envs: int, path: str, learner_data: str = "blocks", **settings):
    # per_world: the batched simulator behind RLlib's per-world episode loop (the path a
    # runner takes when it must); chunks: the learner reads episode chunks (as one
    # without a block batch does).
    sampler = "per_world" if path == "per_world" else "auto"
    if path == "batched" and learner_data == "chunks":
        sampler = "episode_chunks"
    config = algos.mappo(**settings).rllib_config(  # the env's own hyperparameter source
        make_env(env_name), seed=0, num_env_runners=0, num_envs_per_env_runner=num_envs,
        sampler=sampler,
    )  # fmt: skip
    if path == "copies":
        # RLlib's own vector env: num_envs separate one-world simulators, stepped in turn.
        from ray.rllib.env.multi_agent_env_runner import MultiAgentEnvRunner

        config.env_runners(env_runner_cls=MultiAgentEnvRunner)
    return config.build_algo()


def sampling_steps_per_second(
    env_name: str, num_envs: int, steps: int, path: str, learner_data: str = "blocks"
) -> float:
    """Env steps/s of one env runner in the driver sampling with a `mappo` policy;
    ``path``: "batched" (rollout.ArrayRollout), "per_world" or "copies";
    ``learner_data``: what the batched path hands over ("blocks" or episode "chunks")."""
    algorithm = _algorithm(env_name, num_envs, path, learner_data)
    try:
        runner = algorithm.env_runner
        runner.sample(num_timesteps=num_envs * 20, explore=True)  # warm-up
        start = time.perf_counter()
        episodes = runner.sample(num_timesteps=steps, explore=True)
        elapsed = time.perf_counter() - start
        sampled = sum(episode.env_steps() for episode in episodes)
        if path == "batched":
            assert runner.array_rollout is not None, runner.sampling
    finally:
        algorithm.stop()
    return sampled / elapsed


def training_steps_per_second(
    env_name: str,
    num_envs: int,
    iterations: int,
    module_minibatches: str = "same_rows",
    learner_data: str = "blocks",
) -> tuple:
    """``(end-to-end env steps/s, collection env steps/s, learner s per iteration, of
    which the learner connector's batch building)`` of
    `mappo` training with BenchMARL's MAPPO batch settings: 4000 env steps per
    iteration, minibatches of 1000 env steps, 5 epochs; the first iteration is a
    warm-up. BenchMARL's minibatch counts frames, each holding every agent of the
    group; the shared actor's minibatch counts agent rows, so it is 1000 x n_agents
    (the same 20 SGD steps per iteration). ``module_minibatches``: ``equal_passes``
    steps the joint critic on the minibatch's frames, as BenchMARL's critic;
    ``learner_data``: "blocks" (the learner builds its batch from the rollout's arrays)
    or "chunks" (episode chunks through RLlib's learner connectors)."""
    n_agents = len(make_env(env_name).layout.agents)
    algorithm = _algorithm(
        env_name,
        num_envs,
        "batched",
        learner_data,
        train_batch_size=4000,
        minibatch_size=1000 * n_agents,
        num_epochs=5,
        module_minibatches=module_minibatches,
    )
    try:
        algorithm.train()
        steps = sample_s = learn_s = connector_s = 0.0
        start = time.perf_counter()
        for _ in range(iterations):
            result = algorithm.train()
            steps += result["env_runners"]["num_env_steps_sampled"]
            timers = result["timers"]
            sample_s += timers["env_runner_sampling_timer"]
            learn_s += timers["learner_update_timer"]
            learner = result["learners"]["__all_modules__"]
            if "block_batch_timer" in learner:
                connector_s += learner["block_batch_timer"]
            else:
                connector_s += learner["learner_connector"]["connector_pipeline_timer"]
        elapsed = time.perf_counter() - start
    finally:
        algorithm.stop()
    return steps / elapsed, steps / sample_s, learn_s / iterations, connector_s / iterations


def sgd_floor_seconds(
    obs_dim: int,
    state_dim: int,
    act_dim: int,
    rows: int,
    steps: int = 20,
    hidden: int = 128,
    critic_rows: int | None = None,
) -> float:
    """Seconds of ``steps`` PPO minibatch steps of ``rows`` rows in a plain torch loop, no
    RLlib: a Gaussian actor (obs -> 2 x act_dim) and a critic (state -> 1), each with
    two tanh hidden layers, clipped surrogate plus entropy plus value loss, Adam. The
    compute floor of one iteration's SGD (BenchMARL's settings: 5 epochs x 4
    minibatches of 1000 frames x n_agents rows). ``critic_rows`` (default ``rows``): the
    critic's rows per step; BenchMARL's critic sees the 1000 frames of a minibatch."""

    def mlp(inputs: int, outputs: int) -> torch.nn.Module:
        return torch.nn.Sequential(
            torch.nn.Linear(inputs, hidden), torch.nn.Tanh(),
            torch.nn.Linear(hidden, hidden), torch.nn.Tanh(),
            torch.nn.Linear(hidden, outputs),
        )  # fmt: skip

    generator = torch.Generator().manual_seed(0)
    actor, critic = mlp(obs_dim, 2 * act_dim), mlp(state_dim, 1)
    optimizer = torch.optim.Adam([*actor.parameters(), *critic.parameters()], lr=5e-5)
    obs = torch.randn(rows, obs_dim, generator=generator)
    state = torch.randn(critic_rows or rows, state_dim, generator=generator)
    actions = torch.randn(rows, act_dim, generator=generator)
    old_logp = torch.randn(rows, generator=generator)
    advantages = torch.randn(rows, generator=generator)
    targets = torch.randn(critic_rows or rows, generator=generator)

    def step() -> None:
        mean, log_std = actor(obs).chunk(2, dim=-1)
        dist = torch.distributions.Normal(mean, log_std.exp())
        ratio = torch.exp(dist.log_prob(actions).sum(-1) - old_logp)
        surrogate = torch.min(ratio * advantages, torch.clamp(ratio, 0.8, 1.2) * advantages)
        value_loss = torch.mean((critic(state).squeeze(-1) - targets) ** 2)
        loss = -surrogate.mean() - 0.01 * dist.entropy().sum(-1).mean() + value_loss
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_([*actor.parameters(), *critic.parameters()], 10.0)
        optimizer.step()

    step()  # warm-up
    start = time.perf_counter()
    for _ in range(steps):
        step()
    return time.perf_counter() - start


# Runs in BenchMARL's interpreter: one experiment, timestamps of each iteration's
# collected batch and trained networks.
BENCHMARL_DRIVER = r"""
import json, sys, time
import torch
from benchmarl.algorithms import MappoConfig
from benchmarl.environments import VmasTask
from benchmarl.experiment import Experiment, ExperimentConfig
from benchmarl.experiment.callback import Callback
from benchmarl.models.mlp import MlpConfig

args = json.loads(sys.argv[1])
if args["threads"]:
    torch.set_num_threads(args["threads"])


class Stamps(Callback):
    def __init__(self):
        super().__init__()
        self.collected, self.trained = [], []

    def on_batch_collected(self, batch):
        self.collected.append(time.perf_counter())

    def on_train_end(self, training_td, group):
        self.trained.append(time.perf_counter())


config = ExperimentConfig.get_from_yaml()
config.sampling_device = config.train_device = config.buffer_device = "cpu"
config.on_policy_collected_frames_per_batch = args["frames"]
config.on_policy_n_envs_per_worker = args["num_envs"]
config.on_policy_minibatch_size = args["minibatch"]
config.on_policy_n_minibatch_iters = args["epochs"]
config.max_n_frames = args["frames"] * (args["iterations"] + 1)
config.evaluation = False
config.render = False
config.loggers = []
config.create_json = False
config.checkpoint_interval = 0
config.checkpoint_at_end = False
config.save_folder = args["folder"]
stamps = Stamps()
experiment = Experiment(
    task=getattr(VmasTask, args["task"].upper()).get_from_yaml(),
    algorithm_config=MappoConfig.get_from_yaml(),
    model_config=MlpConfig.get_from_yaml(),
    critic_model_config=MlpConfig.get_from_yaml(),
    seed=0,
    config=config,
    callbacks=[stamps],
)
experiment.run()
print("STAMPS " + json.dumps({"collected": stamps.collected, "trained": stamps.trained}))
"""


def benchmarl_rates(python: str, args, folder: str) -> dict[str, float]:
    """BenchMARL's env steps/s end to end and while collecting, and its training seconds
    per iteration, over the iterations after the first."""
    arguments = {
        "task": args.task,
        "frames": args.frames,
        "num_envs": args.num_envs[-1],
        "minibatch": args.minibatch,
        "epochs": args.epochs,
        "iterations": args.iterations,
        "threads": args.torch_threads,
        "folder": folder,
    }
    done = subprocess.run(
        [python, "-c", BENCHMARL_DRIVER, json.dumps(arguments)],
        capture_output=True,
        text=True,
        check=False,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("STAMPS ")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"BenchMARL failed ({done.returncode}):\n{done.stderr[-3000:]}")
    stamps = json.loads(lines[-1][len("STAMPS ") :])
    collected, trained = stamps["collected"], stamps["trained"]
    timed = range(1, len(trained))
    collect_s = sum(collected[i] - trained[i - 1] for i in timed)
    train_s = sum(trained[i] - collected[i] for i in timed)
    steps = args.frames * len(timed)
    return {
        "end_to_end": steps / (trained[-1] - trained[0]),
        "collection": steps / collect_s,
        "learner_s": train_s / len(timed),
    }


def train_rate(args, settings: dict, folder: str) -> float:
    """`marllib-ext train mappo`'s env steps/s end to end over the iterations after the
    first (its progress.csv's ``time_this_iter_s``)."""
    overrides = [f"{key}={value}" for key, value in settings.items()]
    command = [
        sys.executable, "-m", "marllib_ext.cli", "train", "mappo", "--env", f"vmas:{args.task}",
        "--set", *overrides, "--stop-timesteps", str(args.frames * (args.iterations + 1)),
        "--local-dir", folder,
    ]  # fmt: skip
    if args.torch_threads:
        command += ["--threads", str(args.torch_threads)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"marllib-ext train failed:\n{done.stderr[-3000:]}")
    (progress,) = Path(folder).rglob("progress.csv")
    with progress.open() as f:
        rows = list(csv.DictReader(f))[1:]
    steps = float(rows[-1]["timesteps_total"]) - float(rows[0]["timesteps_total"])
    seconds = sum(float(row["time_this_iter_s"]) for row in rows[1:])
    return steps / seconds


def benchmarl_comparison(args) -> None:
    """BenchMARL's MAPPO, then `marllib-ext train mappo`, on ``--num-envs`` (its last
    value) worlds: the rows the docstring names."""
    n_agents = len(make_env(f"vmas:{args.task}").layout.agents)
    batch = {
        "train_batch_size": args.frames,
        "num_envs_per_env_runner": args.num_envs[-1],
        "num_epochs": args.epochs,
    }
    agent_rows = args.minibatch * n_agents
    rows = {
        f"mappo, minibatch_size = {args.minibatch} rows": {
            **batch,
            "minibatch_size": args.minibatch,
        },
        f"mappo, minibatch_size = {agent_rows} (the frames' agent rows)": {
            **batch,
            "minibatch_size": agent_rows,
        },
        "mappo, agent rows, 256 x 256 networks (BenchMARL's)": {
            **batch,
            "minibatch_size": agent_rows,
            "actor_hiddens": "[256,256]",
            "critic_hiddens": "[256,256]",
        },
    }
    with tempfile.TemporaryDirectory() as folder:
        reference = benchmarl_rates(args.benchmarl_python, args, folder)
        print(
            f"BenchMARL MAPPO: {reference['end_to_end']:,.0f} env steps/s end to end, "
            f"collection {reference['collection']:,.0f}, training "
            f"{reference['learner_s']:.2f} s per iteration",
            flush=True,
        )
        for index, (label, settings) in enumerate(rows.items()):
            rate = train_rate(args, settings, os.path.join(folder, f"run{index}"))
            print(
                f"{label}: {rate:,.0f} env steps/s end to end "
                f"({rate / reference['end_to_end']:.2f}x BenchMARL)",
                flush=True,
            )


def main() -> None:
    parser = common.parser(__doc__)
    parser.add_argument("--task", default="navigation")
    parser.add_argument("--num-envs", type=int, nargs="+", default=[40, 400])
    parser.add_argument("--steps", type=int, default=40000)
    parser.add_argument("--train-iters", type=int, default=5)
    parser.add_argument(
        "--copies-up-to", type=int, default=40,
        help="measure one-world copies only up to this many worlds (they step in turn)",
    )  # fmt: skip
    parser.add_argument(
        "--torch-threads", type=int, default=1,
        help="torch's intra-op threads for everything timed (2: torch's default here)",
    )  # fmt: skip
    parser.add_argument(
        "--module-minibatches", default="same_rows", choices=MODULE_MINIBATCHES,
        help="training: equal_passes steps the joint critic on each minibatch's frames",
    )  # fmt: skip
    parser.add_argument(
        "--learner-data", nargs="+", default=["blocks", "chunks"], choices=["blocks", "chunks"],
        help="what the batched runner hands mappo's learner: rollout blocks or episode chunks",
    )  # fmt: skip
    parser.add_argument("--benchmarl-python", default=None, help="run the BenchMARL rows")
    parser.add_argument("--frames", type=int, default=40000, help="BenchMARL rows: batch")
    parser.add_argument("--minibatch", type=int, default=10000, help="BenchMARL rows: frames")
    parser.add_argument("--epochs", type=int, default=5, help="BenchMARL rows")
    parser.add_argument("--iterations", type=int, default=4, help="BenchMARL rows: timed")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    if args.benchmarl_python:
        benchmarl_comparison(args)
        return
    torch.set_num_threads(args.torch_threads)
    common.start_ray(num_cpus=2)
    env_name = f"vmas:{args.task}"
    rows = []
    for num_envs in args.num_envs:
        raw = raw_vmas_steps_per_second(args.task, num_envs, args.steps)
        blocks = sampling_steps_per_second(env_name, num_envs, args.steps, "batched")
        ours = sampling_steps_per_second(env_name, num_envs, args.steps, "batched", "chunks")
        per_world = sampling_steps_per_second(
            env_name, num_envs, min(args.steps, 100 * num_envs), "per_world"
        )
        copies = None
        if num_envs <= args.copies_up_to:
            copies = sampling_steps_per_second(env_name, num_envs, 8000, "copies")
        print(
            f"num_envs {num_envs:3d}: raw VMAS {raw:8.0f} | batched rollout, blocks "
            f"{blocks:6.0f} ({blocks / raw:.3f} of raw), episode chunks {ours:6.0f} "
            f"({ours / raw:.3f}) | per-world path {per_world:6.0f} | one-world copies "
            f"{copies or float('nan'):6.0f}",
            flush=True,
        )
        for learner_data in args.learner_data:
            end_to_end, collection, learn_s, connector_s = training_steps_per_second(
                env_name, num_envs, args.train_iters, args.module_minibatches, learner_data
            )
            rows.append(
                (num_envs, raw, blocks, ours, per_world, copies, learner_data, end_to_end,
                 collection, learn_s, connector_s)
            )  # fmt: skip
            print(
                f"  training on {learner_data}: end-to-end {end_to_end:6.0f}, collection "
                f"{collection:6.0f} ({collection / raw:.3f} of raw), learner {learn_s:.2f} "
                f"s/iteration ({connector_s:.3f} s building its batch)",
                flush=True,
            )
    ray.shutdown()
    layout = make_env(env_name).layout
    agent = layout.agents[0]
    dims = (
        layout.observation_spaces[agent].shape[0],
        layout.state_space.shape[0],
        layout.action_spaces[agent].shape[0],
    )
    floor = sgd_floor_seconds(*dims, rows=1000 * len(layout.agents))
    frames_floor = sgd_floor_seconds(*dims, rows=1000 * len(layout.agents), critic_rows=1000)
    print(
        f"plain-torch SGD floor: {floor:.2f} s per iteration (20 minibatch steps, the "
        f"critic on as many rows as the actor, as mappo's joint critic takes them); "
        f"{frames_floor:.2f} s with the critic on the minibatch's 1000 frames (BenchMARL); "
        f"{torch.get_num_threads()} torch thread(s)"
    )
    print("\n| worlds | raw VMAS | batched rollout: blocks (share of raw) | episode chunks "
          "(share) | per-world path | one-world copies | learner data | training "
          "end-to-end | training collection (share of raw) | learner s / 4000 steps | of "
          "which batch building |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        (num_envs, raw, blocks, ours, per_world, copies, learner_data, end_to_end,
         collection, learn_s, connector_s) = row  # fmt: skip
        copies_cell = f"{copies:.0f}" if copies else "–"
        print(
            f"| {num_envs} | {raw:.0f} | {blocks:.0f} ({blocks / raw:.2f}) | {ours:.0f} "
            f"({ours / raw:.2f}) | {per_world:.0f} | {copies_cell} | {learner_data} | "
            f"{end_to_end:.0f} | {collection:.0f} ({collection / raw:.2f}) | {learn_s:.2f} | "
            f"{connector_s:.3f} |"
        )


if __name__ == "__main__":
    main()
