"""The one home for RLlib internals this package relies on (ray 2.60), one module per
subject: ``settings`` (typed settings on a config), ``connectors``, ``env_runners``,
``episodes``, ``learners``, ``data_parallel``, ``minibatches``, ``off_policy`` and
``checkpoints``.

Everything there touches a private attribute or method of RLlib, or a convention RLlib
does not document as API. Each function says which RLlib behaviour it relies on;
``tests/test_rllib_compat.py`` fails if RLlib changes one of them. Nothing else in
``marllib_ext`` reads ``learner_config_dict`` or a private RLlib name. Nothing here
changes an RLlib class: the package's own runners, episodes and learners subclass them.
This module re-exports what the rest of the package imports most."""

from marllib_ext.rllib_compat.connectors import (
    connectors_of,
    env_to_module,
    replace_connector,
)
from marllib_ext.rllib_compat.data_parallel import (
    data_parallel,
    first_learners_array,
    max_over_learners,
    sum_over_learners,
    this_learners_rows,
)
from marllib_ext.rllib_compat.env_runners import (
    env_runner_callbacks,
    registered_env_creator,
    reset_before_next_sample,
    sample_episodes,
    skip_end_of_iteration_runner_sync,
)
from marllib_ext.rllib_compat.learners import (
    AveragesGradientsOverLearners,
    ObservesBatchBeforeLoss,
    ReadsEpisodesAsSortedAgents,
    RestoresOptimizerStateUnshared,
    SameModuleOrderOnEveryLearner,
    local_learner,
    plain_module,
    record_extra_loss,
    should_save_component,
)
from marllib_ext.rllib_compat.off_policy import (
    ActorBackwardApart,
    BuildsReplayBuffer,
    TargetUpdateEveryGradientStep,
    hand_priorities_to_replay,
    last_td_error,
    priorities_from_learner,
    priority_trees,
)
from marllib_ext.rllib_compat.settings import (
    SETTINGS_KEY,
    learner_value,
    settings_of,
    with_learner_value,
    with_settings,
)

__all__ = [
    "SETTINGS_KEY",
    "ActorBackwardApart",
    "AveragesGradientsOverLearners",
    "BuildsReplayBuffer",
    "ObservesBatchBeforeLoss",
    "ReadsEpisodesAsSortedAgents",
    "RestoresOptimizerStateUnshared",
    "SameModuleOrderOnEveryLearner",
    "TargetUpdateEveryGradientStep",
    "connectors_of",
    "data_parallel",
    "env_runner_callbacks",
    "env_to_module",
    "first_learners_array",
    "hand_priorities_to_replay",
    "last_td_error",
    "learner_value",
    "local_learner",
    "max_over_learners",
    "plain_module",
    "priorities_from_learner",
    "priority_trees",
    "record_extra_loss",
    "registered_env_creator",
    "replace_connector",
    "reset_before_next_sample",
    "sample_episodes",
    "skip_end_of_iteration_runner_sync",
    "settings_of",
    "should_save_component",
    "sum_over_learners",
    "this_learners_rows",
    "with_learner_value",
    "with_settings",
]
