"""Data-parallel (DDP) learners: whether this learner is one of several, and the
collectives that keep them in step."""

from __future__ import annotations

import numpy as np
import torch


def _process_group_device():
    """``None`` without a process group (0 or 1 learner), else the device its collectives
    take tensors on.

    Relies on: with ``num_learners > 1`` RLlib's ``LearnerGroup`` starts the learner
    actors through Ray Train's ``TorchConfig``, which initializes ``torch.distributed``
    (gloo on CPU, nccl on GPU) in every learner before ``Learner.build()``."""
    if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
        return None
    if torch.distributed.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def data_parallel() -> bool:
    """Whether this learner is one of several data-parallel (DDP) learners."""
    return _process_group_device() is not None


def max_over_learners(count: int) -> int:
    """The largest ``count`` over all data-parallel learners (``count`` itself with one):
    every learner must take the same number of DDP steps or the all-reduce hangs."""
    device = _process_group_device()
    if device is None:
        return int(count)
    value = torch.tensor([int(count)], dtype=torch.int64, device=device)
    torch.distributed.all_reduce(value, op=torch.distributed.ReduceOp.MAX)
    return int(value.item())


def sum_over_learners(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` summed over all data-parallel learners (``tensor`` itself with one);
    every learner gets the same sum, on ``tensor``'s device."""
    device = _process_group_device()
    if device is None:
        return tensor
    value = tensor.detach().to(device).clone()
    torch.distributed.all_reduce(value, op=torch.distributed.ReduceOp.SUM)
    return value.to(tensor.device)


def first_learners_array(array: np.ndarray) -> np.ndarray:
    """The first learner's ``array`` (an int64 or float64 array of the same shape on
    every learner), for choices that must agree across learners (HAPPO's order)."""
    device = _process_group_device()
    if device is None:
        return array
    tensor = torch.as_tensor(np.ascontiguousarray(array), device=device)
    torch.distributed.broadcast(tensor, src=0)
    return tensor.cpu().numpy()


def learner_index_and_count() -> tuple[int, int]:
    """``(this learner's index, the number of data-parallel learners)``; ``(0, 1)`` with
    one learner."""
    if _process_group_device() is None:
        return 0, 1
    return torch.distributed.get_rank(), torch.distributed.get_world_size()


def this_learners_rows(num_rows: int) -> slice:
    """The rows of a ``num_rows``-row batch this learner trains on: contiguous shares of
    ``ceil(num_rows / N)`` rows in learner order (the last may hold fewer), as RLlib's
    ``ShardBatchIterator`` splits a batch; every row with one learner."""
    index, count = learner_index_and_count()
    share = -(-num_rows // count)
    return slice(min(index * share, num_rows), min((index + 1) * share, num_rows))


def average_over_learners(tensors: list[torch.Tensor]) -> None:
    """Replaces every tensor by its mean over the data-parallel learners, in place, in one
    all-reduce (nothing with one learner). Every learner passes the same shapes in the
    same order, or the all-reduce hangs."""
    device = _process_group_device()
    if device is None or not tensors:
        return
    flat = torch.cat([t.detach().reshape(-1).to(device) for t in tensors])
    torch.distributed.all_reduce(flat, op=torch.distributed.ReduceOp.SUM)
    flat /= torch.distributed.get_world_size()
    offset = 0
    for tensor in tensors:
        size = tensor.numel()
        tensor.copy_(flat[offset : offset + size].view_as(tensor))
        offset += size


def copy_first_learners_tensors(tensors: list[torch.Tensor]) -> None:
    """Overwrites every tensor with the first learner's, in place (nothing with one
    learner): the learners start from the same weights."""
    device = _process_group_device()
    if device is None:
        return
    for tensor in tensors:
        buffer = tensor.detach().to(device).contiguous()
        torch.distributed.broadcast(buffer, src=0)
        tensor.copy_(buffer)
