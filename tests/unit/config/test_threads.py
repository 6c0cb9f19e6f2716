"""Process-wide thread pools: set by the entry points from the options, never by a library
call (loading the real pipeline: the slow tier)."""

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


def blas_threads() -> set[int]:
    return {p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"}


def test_process_limits_come_from_the_options():
    from speechpipe.config import PipelineOptions
    from speechpipe.session import apply_process_limits

    with threadpool_limits(limits=None):
        threadpool_limits(limits=2, user_api="blas")
        apply_process_limits(PipelineOptions(blas_threads=None))
        assert blas_threads() == {2}
        apply_process_limits(PipelineOptions())  # the default: one BLAS thread
        assert blas_threads() == {1}
