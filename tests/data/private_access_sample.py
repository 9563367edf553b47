"""Each kind of private RLlib access the guard test must find (never imported)."""

from ray.tune.registry import _global_registry  # noqa: F401


def reads_a_learners_pipeline(learner):
    return learner._learner_connector


def skips_metrics_reduction(learner, batch):
    return learner.update(batch=batch, _no_metrics_reduce=True)


class SkipsAMixin(dict):
    def update(self, *args, **kwargs):
        return super(dict, self).update(*args, **kwargs)


def calls_a_modules_private_forward(module, batch):
    return module._forward(batch)
