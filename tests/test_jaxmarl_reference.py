"""The categorical distribution ``scripts/jaxmarl_reference.py`` hands JaxMARL's IPPO in
place of ``distrax.Categorical``: its log-probabilities, entropy and samples against the
definitions, on literal logits."""

import importlib.util
from pathlib import Path

import numpy as np
import pytest

jax = pytest.importorskip("jax")

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "jaxmarl_reference.py"


def distribution():
    spec = importlib.util.spec_from_file_location("jaxmarl_reference", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.categorical_distribution().Categorical


LOGITS = np.array([[0.0, 1.0, 2.0], [3.0, -1.0, 0.5]], dtype=np.float32)


def test_log_prob_and_entropy_are_the_softmax_definitions():
    probs = np.exp(LOGITS) / np.exp(LOGITS).sum(-1, keepdims=True)
    pi = distribution()(LOGITS)
    actions = np.array([2, 1])
    np.testing.assert_allclose(pi.log_prob(actions), np.log(probs[[0, 1], actions]), rtol=1e-5)
    np.testing.assert_allclose(pi.entropy(), -(probs * np.log(probs)).sum(-1), rtol=1e-5)
    # [0, 1, 2]: log-probabilities -2.4076, -1.4076, -0.4076
    np.testing.assert_allclose(pi.log_prob(np.array([0, 0]))[0], -2.40761, atol=1e-4)


def test_samples_follow_the_probabilities():
    logits = np.tile(LOGITS[:1], (20000, 1))
    samples = np.asarray(distribution()(logits).sample(seed=jax.random.PRNGKey(0)))
    frequencies = np.bincount(samples, minlength=3) / len(samples)
    np.testing.assert_allclose(frequencies, [0.0900, 0.2447, 0.6652], atol=0.01)
