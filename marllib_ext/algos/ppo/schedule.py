"""What one training iteration of an on-policy learner does, declared as data.

A schedule is a tuple of phases run in order on one batch (the learner connector runs
once per iteration). A phase names the modules it trains, its step kind, the settings
keys of its epochs, minibatch size and learning rate, the order of its modules and any
weighting of their advantages. The one update loop
(:class:`marllib_ext.algos.ppo.phased.PhasedLearner`) runs them; nothing else decides
the order of work. Every settings key a phase reads is listed here, so a key that no
phase of an algorithm reads is refused with the reason (:func:`ignored_keys`).
"""

from __future__ import annotations

from dataclasses import dataclass

# Modules a phase trains.
ALL = "all"  # every module of the batch, in one update
ACTORS = "actors"  # the policy modules
CRITICS = "critics"  # the learner-only joint critics, or on the independent pipeline
# (no joint critic) every policy module, whose own value head is its critic
MODULE_SETS = (ALL, ACTORS, CRITICS)

# Step kinds: epochs of shuffled minibatch SGD, one whole-batch trust-region step per
# module, or SGD epochs of a projection loss toward the policy the previous phase left.
SGD = "sgd"
TRUST_REGION = "trust_region"
PROJECTION = "projection"
STEP_KINDS = (SGD, TRUST_REGION, PROJECTION)

# Module orders: all modules in one update, one after another in sorted order, or one
# after another in an order drawn afresh each iteration (the same on every learner).
TOGETHER = "together"
SORTED = "sorted"
DRAWN = "drawn"
ORDERS = (TOGETHER, SORTED, DRAWN)

# Advantage weightings: HAPPO's M, the product of pi_new / pi_old of the policies of the
# team already updated in this phase.
HAPPO_FACTOR = "happo_factor"
WEIGHTINGS = (None, HAPPO_FACTOR)

# The settings keys each loss and step kind reads (besides epochs, minibatch and lr).
LOSS_KEYS: dict[str, tuple[str, ...]] = {
    "ppo_clip": ("clip_param", "entropy_coeff", "use_kl_loss", "kl_coeff", "kl_target"),
    "a2c": ("entropy_coeff",),
    "focops": ("entropy_coeff",),
    "value": (
        "critic_lr",
        "vf_loss_coeff",
        "vf_clip_param",
        "value_norm",
        "value_norm_beta",
        "huber_delta",
        "value_clip",
    ),
    "cup_projection": (),
    "trust_region_surrogate": (),
}
STEP_KEYS: dict[str, tuple[str, ...]] = {
    SGD: ("grad_clip", "module_minibatches"),
    PROJECTION: ("grad_clip",),
    TRUST_REGION: (
        "kl_threshold",
        "cg_iterations",
        "cg_damping",
        "backtrack_coef",
        "line_search_steps",
        "accept_ratio",
        "fisher_subsample",
    ),
}
# What a loss is, in words (the schedule table and the refusal messages).
LOSS_WORDS = {
    "ppo_clip": "PPO's clipped surrogate",
    "a2c": "A2C's policy gradient",
    "focops": "FOCOPS's loss",
    "value": "the value loss",
    "cup_projection": "CUP's cost projection",
    "trust_region_surrogate": "the surrogate r * A",
}


@dataclass(frozen=True)
class Phase:
    """One part of an iteration's update.

    ``epochs``, ``minibatch_size`` and ``lr`` name settings keys (``None``: the phase
    takes no optimizer step, as a trust-region step). The last phase that takes SGD
    steps gives RLlib's ``num_epochs``, ``minibatch_size`` and ``lr``; another SGD phase
    with other epoch or minibatch keys runs its own epochs and minibatches on the same
    optimizer. One optimizer per module: every SGD phase of a schedule names one
    ``lr`` key."""

    modules: str
    step: str
    losses: tuple[str, ...]
    epochs: str | None = "num_epochs"
    minibatch_size: str | None = "minibatch_size"
    lr: str | None = "lr"
    order: str = TOGETHER
    weighting: str | None = None

    def __post_init__(self) -> None:
        for value, allowed, field in (
            (self.modules, MODULE_SETS, "modules"),
            (self.step, STEP_KINDS, "step"),
            (self.order, ORDERS, "order"),
            (self.weighting, WEIGHTINGS, "weighting"),
        ):
            if value not in allowed:
                raise ValueError(f"Phase.{field} = {value!r}: one of {allowed}")
        unknown = [loss for loss in self.losses if loss not in LOSS_KEYS]
        if unknown:
            raise ValueError(f"Phase.losses: unknown {unknown}; known {sorted(LOSS_KEYS)}")
        takes_sgd = self.step != TRUST_REGION
        if takes_sgd != (self.epochs is not None and self.lr is not None):
            raise ValueError("Phase: SGD and projection phases name epochs and lr; others none")

    @property
    def reads(self) -> tuple[str, ...]:
        """Every settings key this phase reads."""
        keys = [k for k in (self.epochs, self.minibatch_size, self.lr) if k is not None]
        keys += STEP_KEYS[self.step]
        for loss in self.losses:
            keys += LOSS_KEYS[loss]
        return tuple(dict.fromkeys(keys))


Schedule = tuple[Phase, ...]

# ---- the schedules ------------------------------------------------------------------
PPO = (Phase(ALL, SGD, ("ppo_clip", "value")),)
A2C = (Phase(ALL, SGD, ("a2c", "value")),)
FOCOPS = (Phase(ALL, SGD, ("focops", "value")),)
HAPPO = (
    Phase(CRITICS, SGD, ("value",)),
    Phase(ACTORS, SGD, ("ppo_clip",), order=DRAWN, weighting=HAPPO_FACTOR),
)
COMA = (
    Phase(CRITICS, SGD, ("value",), epochs="critic_epochs", minibatch_size="critic_minibatch_size"),
    Phase(ACTORS, SGD, ("a2c",)),
)
CUP = (
    Phase(ALL, SGD, ("ppo_clip", "value")),
    Phase(ACTORS, PROJECTION, ("cup_projection",)),
)
_TRUST_REGION_STEP = {"epochs": None, "minibatch_size": None, "lr": None}
_CRITIC_SGD = {
    "epochs": "critic_epochs",
    "minibatch_size": "critic_minibatch_size",
    "lr": "critic_lr",
}
TRPO = (
    Phase(ACTORS, TRUST_REGION, ("trust_region_surrogate",), order=SORTED, **_TRUST_REGION_STEP),
    Phase(CRITICS, SGD, ("value",), **_CRITIC_SGD),
)
HATRPO = (
    Phase(
        ACTORS,
        TRUST_REGION,
        ("trust_region_surrogate",),
        order=DRAWN,
        weighting=HAPPO_FACTOR,
        **_TRUST_REGION_STEP,
    ),
    Phase(CRITICS, SGD, ("value",), **_CRITIC_SGD),
)

# Keys some phase of some schedule reads: the only keys a schedule can leave unread.
PHASE_KEYS = frozenset(
    key
    for schedule in (PPO, A2C, FOCOPS, HAPPO, COMA, CUP, TRPO, HATRPO)
    for phase in schedule
    for key in phase.reads
)


def rllib_phase(schedule: Schedule) -> Phase:
    """The last phase that takes SGD steps: its keys give RLlib's ``lr``,
    ``num_epochs`` and ``minibatch_size``."""
    return [phase for phase in schedule if phase.step != TRUST_REGION][-1]


def ignored_keys(schedule: Schedule, settings_fields: set[str]) -> dict[str, str]:
    """``{key: reason}`` for every phase key of ``settings_fields`` that no phase of
    ``schedule`` reads; the reason says what the algorithm does instead."""
    read = {key for phase in schedule for key in phase.reads}
    ignored = {}
    for key in sorted((settings_fields & PHASE_KEYS) - read):
        replacement = _same_role(key, schedule)
        ignored[key] = (
            "its "
            + "; ".join(_phase_words(p) for p in schedule)
            + (f" (use {replacement})" if replacement else "")
        )
    return ignored


def _phase_words(phase: Phase) -> str:
    take = {SGD: "take SGD steps", TRUST_REGION: "take trust-region steps"}
    verb = take.get(phase.step, "take a projection step")
    losses = " and ".join(LOSS_WORDS[loss] for loss in phase.losses)
    return f"{phase.modules} {verb} on {losses}"


def _same_role(key: str, schedule: Schedule) -> str | None:
    """The key that plays ``key``'s role in ``schedule`` (``critic_lr`` for ``lr``)."""
    role = {"lr": "lr", "num_epochs": "epochs", "minibatch_size": "minibatch_size"}.get(key)
    if role is None:
        return None
    names = {getattr(p, role) for p in schedule} - {None, key}
    return ", ".join(sorted(names)) or None


def schedule_table(schedules: dict[str, Schedule]) -> str:
    """A markdown table: one row per phase, each algorithm's phases in order."""
    lines = [
        "| algorithm | phase | trains | step | loss | epochs x minibatch | lr | order |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, schedule in schedules.items():
        for index, phase in enumerate(schedule):
            sgd = (
                f"`{phase.epochs}` x `{phase.minibatch_size}`" if phase.epochs is not None else "-"
            )
            order = phase.order + (f", {phase.weighting}" if phase.weighting else "")
            lines.append(
                f"| {f'`{name}`' if index == 0 else ''} | {index + 1} | {phase.modules} | "
                f"{phase.step} | {' + '.join(phase.losses)} | {sgd} | "
                f"{f'`{phase.lr}`' if phase.lr else '-'} | {order} |"
            )
    return "\n".join(lines)
