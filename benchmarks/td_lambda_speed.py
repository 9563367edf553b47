"""TD(lambda) targets: the blocked scan (``ops.td.td_lambda_targets``) against the step
loop it replaced, on replayed batches of pymarl2's size, in one run:

    python benchmarks/td_lambda_speed.py [--device cuda]

Prints milliseconds per call and the loop / scan ratio for each (episodes, steps).
"""

from __future__ import annotations

import argparse
import time

import torch

from marllib_ext.ops.td import td_lambda_targets


def step_loop(rewards, terminateds, next_values, mask, gamma, lambda_):
    """The earlier implementation: one backward step at a time."""
    real, going = mask.float(), gamma * (1.0 - terminateds.float())
    returns = torch.zeros_like(next_values)
    following = torch.zeros_like(returns[:, 0])
    following_real = torch.zeros_like(returns[:, 0])
    for t in range(rewards.shape[1] - 1, -1, -1):
        blend = lambda_ * following_real
        ahead = (1.0 - blend) * next_values[:, t] + blend * following
        returns[:, t] = real[:, t] * (rewards[:, t] + going[:, t] * ahead)
        following, following_real = returns[:, t], real[:, t]
    return returns


def milliseconds(function, args, device: str, calls: int) -> float:
    function(*args)
    if device == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        function(*args)
    if device == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - start) / calls * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"device {args.device}, one torch thread")
    print("| episodes x steps | step loop ms | blocked scan ms | loop / scan | max difference |")
    print("|---|---|---|---|---|")
    generator = torch.Generator().manual_seed(0)
    for episodes, steps in ((32, 50), (128, 60), (128, 120)):
        rewards, next_values = torch.randn(2, episodes, steps, generator=generator)
        mask = torch.ones(episodes, steps)
        lengths = torch.randint(steps // 3, steps + 1, (episodes,), generator=generator)
        mask[torch.arange(steps) >= lengths[:, None]] = 0.0
        terminated = torch.zeros(episodes, steps)
        terminated[torch.arange(episodes), lengths - 1] = 1.0
        batch = [x.to(args.device) for x in (rewards, terminated, next_values, mask)]
        call = (*batch, 0.99, 0.6)
        loop = milliseconds(step_loop, call, args.device, args.calls)
        scan = milliseconds(td_lambda_targets, call, args.device, args.calls)
        difference = (step_loop(*call) - td_lambda_targets(*call)).abs().max().item()
        print(
            f"| {episodes} x {steps} | {loop:.3f} | {scan:.3f} | {loop / scan:.2f} | "
            f"{difference:.1e} |"
        )


if __name__ == "__main__":
    main()
