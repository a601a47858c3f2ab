"""Tests run on every rank under mpiexec (tests/test_dist_mpi.py launches them; their files
are named mpi_*.py so a plain pytest run does not collect them). Each test is a collective:
every rank runs the same tests in the same order, and compares what every rank can see (a
result gathered to all ranks), so ranks pass or fail together."""

import numpy as np
import pytest


@pytest.fixture(scope="session", autouse=True)
def dist():
    import kgen.dist as kd

    kd.init("mpi")
    yield kd
    kd.finalize()


@pytest.fixture
def rng():
    return np.random.default_rng(1234)
