"""The code table (``transport/codes.py``) against docs/protocol.md's two tables.

A close code or error code added to one but not the other fails here, as does a row whose
close code, fatal flag or meaning differs.
"""

from __future__ import annotations

import re

import pytest

from speechpipe import errors
from speechpipe.server.metrics import ServerMetrics
from speechpipe.transport.codes import SERVER_CLOSE_CODES, CloseCode, ErrorCode, refusal_close
from speechpipe.transport.quotas import quota_error
from tests.helpers import PROTOCOL_DOC, close_rows, error_rows

# error codes the pipeline itself emits (not the transport's table): speechpipe.errors, and
# the ASR stage's recoverable translation_incomplete and translation_wrong_language events
PIPELINE_CODES = {cls.code for cls in vars(errors).values()
                  if isinstance(cls, type) and issubclass(cls, errors.SpeechpipeError)}
PIPELINE_CODES.update({"translation_incomplete", "translation_wrong_language"})


def test_the_close_table_is_the_docs_table() -> None:
    assert close_rows() == {int(code): code.meaning for code in CloseCode}


def test_every_error_code_has_its_docs_row() -> None:
    rows = error_rows()
    for code in ErrorCode:
        close = "—" if code.close is None else str(int(code.close))
        mine = [(fatal, c) for codes, fatal, c in rows if code.value in codes]
        assert mine, f"{code.value}: no row in docs/protocol.md's error table"
        assert any(c == close and ("yes" in fatal) == code.fatal for fatal, c in mine), (
            code.value, close, mine)


def test_every_docs_error_row_is_a_known_code() -> None:
    known = {code.value for code in ErrorCode} | PIPELINE_CODES
    for codes, _, close in error_rows():
        assert codes and codes <= known, codes - known
        assert close == "—" or int(close) in {int(c) for c in CloseCode}, close


def test_a_missing_row_is_caught() -> None:
    """Drop one row from each docs table: the comparisons above see it."""
    text = PROTOCOL_DOC.read_text(encoding="utf-8")
    without_close = text.replace("| 4010 | audio fell behind real time (`too_slow`) |\n", "")
    assert without_close != text
    assert close_rows(without_close) != {int(code): code.meaning for code in CloseCode}
    without_error = re.sub(r"\n\| `too_slow` \|[^\n]*", "", text)
    assert without_error != text
    assert not any("too_slow" in codes for codes, _, _ in error_rows(without_error))


def test_the_derived_tables() -> None:
    assert SERVER_CLOSE_CODES == {int(c) for c in CloseCode} - {1006}
    for code in (ErrorCode.IDLE_TIMEOUT, ErrorCode.RATE_LIMITED, ErrorCode.TOO_MANY_SESSIONS,
                 ErrorCode.SESSION_EXPIRED, ErrorCode.TOO_SLOW):
        assert quota_error(code, "x").close_code == code.close
    assert quota_error(ErrorCode.SDP_TOO_LARGE, "x").close_code is None
    assert quota_error("not_a_code", "x").close_code is None
    # the exceptions of speechpipe.errors and their rows agree
    assert errors.AdmissionError.code == ErrorCode.OVER_CAPACITY
    assert errors.SessionRedirect.code == ErrorCode.REDIRECT
    assert errors.VoiceError.code == ErrorCode.NO_VOICE
    assert refusal_close(errors.AdmissionError("full", retry_after_s=5)) == 1013
    assert refusal_close(errors.SessionRedirect("x", url="ws://h/ws", ticket="t",
                                                expires_in_s=5)) == 4020
    assert refusal_close(errors.LanguageError("no")) == 4003


@pytest.mark.parametrize(("code", "label"), [(4010, "4010"), (1006, "other"), (4099, "other"),
                                             (None, "client")])
def test_metrics_label_close_codes_from_the_table(code: int | None, label: str) -> None:
    metrics = ServerMetrics()
    metrics.connection_closed(code, "x", session=True)
    assert f'speechpipe_connections_closed_total{{code="{label}",reason="x"}} 1.0' in (
        metrics.text().decode())
