"""Every on-policy algorithm on one batched simulator, in one run: end-to-end and
collection env steps per second as shares of `mappo`'s, and how each one's env runner
samples (its `sampling` line: rollout blocks, episode chunks built from arrays, or
RLlib's per-world episodes, with the reason a cheaper path was refused).

Each algorithm trains `--iterations` timed iterations after one warm-up, with
`--num-envs` worlds in one env runner in the driver and `--num-envs * --steps-per-world`
env steps per iteration (`num_epochs` 5 and 4 minibatches where the schedule takes
them; A2C and COMA: one step on the whole batch); the rest of each algorithm's
settings are its own for the env's source.

    python benchmarks/onpolicy_paths.py --env vmas:navigation --num-envs 400 \
        --steps-per-world 100 --iterations 3 [--floor] [--set KEY=VALUE ...]

`--set` applies settings to every algorithm that reads them (`module_minibatches`,
`fisher_subsample`); an algorithm named `NAME+KEY=VALUE[+KEY=VALUE]` in `--algos` gets
its own (`efx_mappo+intrinsic_reward=rnd`: EFX's cost with each intrinsic signal).
`--floor` also times each learner's `update` on one more sampled
batch (`--repeats` times, with the minibatch settings the algorithm hands it) against a
plain-torch loop on the same modules and rows: the same minibatch steps with the same
rows per module (drawn beforehand), `forward_train`, the clipped surrogate (HAPPO: with
its factor, recomputed by one forward per actor) or the value loss, backward, gradient
clipping and Adam; a trust-region actor computes its gradient, `cg_iterations`
Fisher-vector products and one line-search forward (the fewest a step can take).
Nothing of RLlib's learner runs in the floor. `--gpus-per-learner 1` puts the learners
(and the floor) on the GPU.
"""

from __future__ import annotations

import statistics
import time
import warnings

import common
import numpy as np
import ray
import torch
import yaml

from marllib_ext import algos, make_env
from marllib_ext.algos.ppo.phased import PhaseContext
from marllib_ext.algos.ppo.schedule import HAPPO_FACTOR, SGD, TRUST_REGION
from marllib_ext.algos.trust_region import policy_parameters
from marllib_ext.errors import ConfigError
from marllib_ext.ops.minibatches import cyclic_minibatch_rows
from marllib_ext.ops.trust_region import conjugate_gradient, fisher_vector_product, flat
from marllib_ext.policies.joint_critic import is_critic_module
from marllib_ext.rllib_compat import local_learner, plain_module
from marllib_ext.rllib_compat.minibatches import minibatch_units

# One policy per agent: the heterogeneous-agent algorithms update them one after another.
INDIVIDUAL = ("happo", "hatrpo", "efx_happo", "efx_hatrpo")


def on_policy_algorithms() -> list[str]:
    return [name for name in algos.ALGORITHMS if algos.get(name).spec.schedule is not None]


def settings_for(name: str, batch: int, extra: dict | None = None) -> dict:
    """The batch size and SGD passes every algorithm is timed at, and ``extra``, where
    it reads them."""
    wanted = {
        "train_batch_size": batch,
        "minibatch_size": batch // 4,
        "critic_minibatch_size": batch // 4,
        "num_epochs": 5,
        **(extra or {}),
    }
    spec = algos.get(name).spec
    ignored = spec.ignored_keys()
    fields = set(spec.settings_class.__dataclass_fields__)
    settings = {k: v for k, v in wanted.items() if k in fields and k not in ignored}
    if name in ("ia2c", "ipg", "maa2c", "vda2c", "coma"):  # one step on the whole batch
        settings.update(minibatch_size=None, num_epochs=1)
    return settings


def parse_value(value: str):
    """``--set``'s value as YAML reads it (``5`` an int, ``0.1`` a float, ``rnd`` a string)."""
    return yaml.safe_load(value)


def labelled(label: str) -> tuple[str, dict]:
    """``NAME+KEY=VALUE+...`` -> ``(NAME, {KEY: VALUE, ...})``."""
    name, *items = label.split("+")
    return name, {k: parse_value(v) for k, _, v in (item.partition("=") for item in items)}


def time_algorithm(label: str, env_name: str, num_envs: int, steps: int, iterations: int, args):
    """``((env steps/s end to end, collection env steps/s[, learner s, floor s]),
    sampling line)`` of ``label`` (an algorithm, with its own settings after ``+``), or
    ``(None, reason)``; collection counts the env runner's ``sample()`` calls."""
    source = env_name.split(":")[0]
    name, own = labelled(label)
    try:
        settings = {**settings_for(name, steps, args.extra), **own}
        if args.gpus_per_learner:
            settings["num_gpus_per_learner"] = args.gpus_per_learner
        algorithm = (
            algos.get(name, hyperparam_source=source, **settings)
            .rllib_config(
                make_env(env_name),
                share_policy="individual" if name in INDIVIDUAL else "all",
                seed=0,
                num_env_runners=0,
                num_envs_per_env_runner=num_envs,
            )
            .build_algo()
        )
    except ConfigError as e:
        return None, f"not run: {e}"
    try:
        sampling = getattr(algorithm.env_runner, "sampling", "sampling: (not reported)")
        try:
            algorithm.train()  # warm-up
        except ValueError as e:  # e.g. a safe learner on an env that reports no cost
            return None, f"not run: {str(e).splitlines()[0]}"
        sampled, sampling_s, start = 0, 0.0, time.perf_counter()
        for _ in range(iterations):
            result = algorithm.train()
            sampled += result["env_runners"]["num_env_steps_sampled"]
            sampling_s += result["timers"]["env_runner_sampling_timer"]
        speeds = (sampled / (time.perf_counter() - start), sampled / sampling_s)
        if args.floor:
            speeds += learner_and_floor_seconds(algorithm, steps, args.repeats)
        return speeds, sampling
    finally:
        algorithm.stop()


def learner_and_floor_seconds(algorithm, steps: int, repeats: int) -> tuple[float, float]:
    """Median seconds of the learner's ``update`` and of the plain-torch floor on one
    more sampled batch."""
    from ray.rllib.core.learner.training_data import TrainingData

    learner = local_learner(algorithm)
    episodes = algorithm.env_runner.sample(num_timesteps=steps, explore=True)
    batch = learner.train_batch(TrainingData(episodes=episodes))
    config = algorithm.config
    kwargs = {
        "num_epochs": config.num_epochs,
        "minibatch_size": config.minibatch_size,
        "shuffle_batch_per_epoch": config.shuffle_batch_per_epoch,
    }
    floor = Floor(learner, batch, kwargs)
    floor.seconds(1)  # warm-up
    return learner_seconds(learner, batch, kwargs, repeats), floor.seconds(repeats)


def learner_seconds(learner, batch, kwargs: dict, repeats: int) -> float:
    from ray.rllib.core.learner.training_data import TrainingData

    timesteps = {"num_env_steps_sampled_lifetime": 0}
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        learner.update(training_data=TrainingData(batch=batch), timesteps=timesteps, **kwargs)
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds)


class Floor:
    """The schedule of ``learner`` in plain torch on its modules and ``batch``'s rows."""

    def __init__(self, learner, batch, kwargs: dict):
        self.learner, self.settings = learner, learner.settings
        self.columns = {m: dict(rows) for m, rows in batch.policy_batches.items()}
        self.modules = {m: plain_module(learner.module, m) for m in self.columns}
        self.optimizers = {
            m: torch.optim.Adam(module.parameters(), lr=1e-5) for m, module in self.modules.items()
        }
        context = PhaseContext(batch, None, kwargs)
        self.plans = []  # per phase: (phase, [steps of {module: row indices}])
        np.random.seed(0)
        for phase in learner.schedule:
            modules = learner.phase_modules(phase, batch)
            if phase.step != SGD:
                self.plans.append((phase, modules))
                continue
            rows = {m: batch.policy_batches[m] for m in modules}
            plan = learner.minibatch_plan(phase, rows, context)
            groups = [modules] if phase.order == "together" else [[m] for m in modules]
            steps = [
                [
                    {m: torch.as_tensor(index, device=learner.device) for m, index in step.items()}
                    for step in cyclic_minibatch_rows(
                        {m: minibatch_units(rows[m]) for m in group},
                        {m: plan.sizes[m] for m in group},
                        num_epochs=plan.num_epochs,
                        num_total_minibatches=plan.num_total_minibatches,
                        shuffle=plan.shuffle,
                    )
                ]
                for group in groups
            ]
            self.plans.append((phase, steps))

    def loss(self, module_id: str, rows: dict, factor=None) -> torch.Tensor:
        module = self.modules[module_id]
        out = module.forward_train(rows)
        mask = rows["loss_mask"]
        if is_critic_module(module_id):
            return torch.mean(torch.square(out["vf_preds"] - rows["value_targets"])[mask])
        dist = module.get_train_action_dist_cls().from_logits(out["action_dist_inputs"])
        ratio = torch.exp(dist.logp(rows["actions"]) - rows["action_logp"])
        advantages = rows["advantages"] * (1.0 if factor is None else factor)
        clip = self.settings.clip_param
        surrogate = torch.min(
            ratio * advantages, torch.clamp(ratio, 1 - clip, 1 + clip) * advantages
        )
        return -surrogate[mask].mean() - self.settings.entropy_coeff * dist.entropy()[mask].mean()

    def sgd(self, steps, weighted: bool) -> None:
        for group_steps in steps:
            factors = {}
            if weighted:  # HAPPO's factor: one forward of each actor on its rows
                for module_id in group_steps[0]:
                    with torch.no_grad():
                        self.modules[module_id].forward_train(self.columns[module_id])
                    rows = len(self.columns[module_id]["obs"])
                    factors[module_id] = torch.ones(rows, device=self.learner.device)
            for step in group_steps:
                loss = 0.0
                for module_id, index in step.items():
                    rows = {c: v.index_select(0, index) for c, v in self.columns[module_id].items()}
                    factor = factors[module_id][index] if module_id in factors else None
                    loss = loss + self.loss(module_id, rows, factor)
                for module_id in step:
                    self.optimizers[module_id].zero_grad(set_to_none=True)
                loss.backward()
                for module_id in step:
                    torch.nn.utils.clip_grad_norm_(
                        self.modules[module_id].parameters(), self.settings.grad_clip
                    )
                    self.optimizers[module_id].step()

    def trust_region(self, module_id: str) -> None:
        module, rows = self.modules[module_id], self.columns[module_id]
        params = policy_parameters(module)
        dist_class = module.get_train_action_dist_cls()
        inputs = module.forward_train(rows)["action_dist_inputs"]
        dist = dist_class.from_logits(inputs)
        mask = rows["loss_mask"]
        surrogate = (
            torch.exp(dist.logp(rows["actions"]) - rows["action_logp"]) * rows["advantages"]
        )[mask].mean()
        gradient = flat(
            torch.autograd.grad(surrogate, params, retain_graph=True, allow_unused=True), params
        )
        every = self.settings.fisher_subsample
        if every > 1:  # the Fisher on every k-th row, from their own forward pass
            rows = {c: v[::every] for c, v in rows.items()}
            inputs = module.forward_train(rows)["action_dist_inputs"]
            dist, mask = dist_class.from_logits(inputs), rows["loss_mask"]
        kl = dist_class.from_logits(inputs.detach()).kl(dist)[mask].mean()
        product = fisher_vector_product(kl, params, damping=self.settings.cg_damping)
        conjugate_gradient(product, gradient, self.settings.cg_iterations)
        with torch.no_grad():
            module.forward_train(self.columns[module_id])  # the line search's one candidate

    def seconds(self, repeats: int) -> float:
        seconds = []
        for _ in range(repeats):
            start = time.perf_counter()
            for phase, plan in self.plans:
                if phase.step == TRUST_REGION:
                    for module_id in plan:
                        self.trust_region(module_id)
                else:
                    self.sgd(plan, weighted=phase.weighting == HAPPO_FACTOR)
            seconds.append(time.perf_counter() - start)
        return statistics.median(seconds)


def main() -> None:
    parser = common.parser(__doc__)
    parser.add_argument("--env", default="vmas:navigation")
    parser.add_argument("--num-envs", type=int, default=400)
    parser.add_argument("--steps-per-world", type=int, default=100)
    parser.add_argument("--iterations", type=int, default=3)
    parser.add_argument("--algos", nargs="*", default=None, help="default: every on-policy one")
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE")
    parser.add_argument("--floor", action="store_true", help="the learner against its floor")
    parser.add_argument("--repeats", type=int, default=3, help="updates timed with --floor")
    parser.add_argument("--gpus-per-learner", type=int, default=0)
    args = parser.parse_args()
    args.extra = {}
    for item in args.set:
        key, _, value = item.partition("=")
        args.extra[key] = parse_value(value)
    warnings.filterwarnings("ignore")
    common.start_ray(num_cpus=2, num_gpus=args.gpus_per_learner or None)
    steps = args.num_envs * args.steps_per_world
    names = args.algos or on_policy_algorithms()
    if "mappo" in names:  # the reference first
        names = ["mappo", *[n for n in names if n != "mappo"]]
    print(f"{args.env}, {args.num_envs} worlds, {steps} env steps per iteration, "
          f"{args.iterations} timed iterations after one warm-up, torch threads "
          f"{torch.get_num_threads()}, settings {args.extra or 'defaults'}")  # fmt: skip
    print("algorithm      end to end (share of mappo's) | collection (share) | "
          + ("learner update s / plain-torch floor s (ratio) | " if args.floor else "")
          + "sampling")  # fmt: skip
    reference = None
    for name in names:
        speeds, sampling = time_algorithm(
            name, args.env, args.num_envs, steps, args.iterations, args
        )
        if speeds is None:
            print(f"{name:14s} {sampling}", flush=True)
            continue
        reference = speeds if name == "mappo" else reference
        shares = (
            [s / r for s, r in zip(speeds[:2], reference[:2], strict=True)] if reference else [0, 0]
        )
        floor = ""
        if args.floor:
            floor = f"{speeds[2]:.2f} / {speeds[3]:.2f} ({speeds[2] / speeds[3]:.2f}) | "
        print(
            f"{name:14s} {speeds[0]:7,.0f} env steps/s ({shares[0]:.2f}) | "
            f"{speeds[1]:7,.0f} ({shares[1]:.2f}) | {floor}{sampling}",
            flush=True,
        )
    ray.shutdown()


if __name__ == "__main__":
    main()
