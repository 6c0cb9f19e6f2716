"""Process-wide thread pools the pipeline sets up before loading models."""

from __future__ import annotations

from threadpoolctl import threadpool_info, threadpool_limits

from speechpipe.session import limit_blas_threads


def test_numpy_blas_runs_on_one_thread_after_the_limit():
    blas = [pool for pool in threadpool_info() if pool["user_api"] == "blas"]
    assert blas, "numpy has no BLAS pool to limit"
    with threadpool_limits(limits=None):  # restore whatever the process had afterwards
        threadpool_limits(limits=2, user_api="blas")
        assert {p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"} != {1}
        limit_blas_threads()
        assert {p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"} == {1}
