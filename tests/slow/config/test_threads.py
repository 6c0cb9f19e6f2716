"""Process-wide thread pools: loading the real pipeline leaves the host process's pools
alone."""

from __future__ import annotations

from threadpoolctl import threadpool_info, threadpool_limits


def blas_threads() -> set[int]:
    return {p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"}


def test_loading_the_pipeline_leaves_the_host_process_alone():
    from speechpipe.session import Pipeline

    with threadpool_limits(limits=None):
        threadpool_limits(limits=2, user_api="blas")
        pipeline = Pipeline.load()
        try:
            assert blas_threads() == {2}
        finally:
            pipeline.close()
