"""The fault drills' documented worker codes: the error codes the shared workers send are the
rows of the docs' table (the drills themselves, on a live server: the slow tier)."""

from __future__ import annotations

from speechpipe.transport.codes import CloseCode


def test_the_worker_codes_are_the_docs_rows() -> None:
    """The worker codes against docs/protocol.md's error table: each is a recoverable row
    (the session goes on), and at ``start`` ``worker_unavailable`` closes as the code table
    says (``refusal_close``: 1013)."""
    from speechpipe.errors import WorkerError, WorkerTimeout, WorkerUnavailable
    from speechpipe.transport.codes import refusal_close
    from tests.helpers import error_rows

    rows = error_rows()
    for kind in (WorkerError, WorkerTimeout, WorkerUnavailable):
        assert ({kind.code}, "no", "—") in rows, kind.code
    at_start = refusal_close(WorkerUnavailable("down", retry_after_s=2.0))
    assert at_start == CloseCode.TRY_AGAIN
    assert ({"worker_unavailable"}, "yes", str(int(at_start))) in rows
