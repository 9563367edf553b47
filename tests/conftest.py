import os

import pytest

os.environ.setdefault("RAY_DEDUP_LOGS", "0")
# Two test processes share the 2 cores: a CLI run in either takes one thread.
os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture(scope="session", autouse=True)
def test_envs():
    """The counter envs (``tests.helpers.register_test_envs``), before any Ray starts."""
    from tests.helpers import register_test_envs

    register_test_envs()


@pytest.fixture(scope="session")
def ray_session():
    """One local Ray for every test that needs it (2 CPUs, as on CI)."""
    import ray

    ray.init(num_cpus=2, include_dashboard=False, configure_logging=False, log_to_driver=False)
    yield
    ray.shutdown()
