"""Coverage-guided fuzzing (atheris, libFuzzer) of the session protocol decoder.

Not part of the pytest run (the hypothesis properties in
``tests/slow/transport/test_fuzz_protocol.py`` are what CI runs). To fuzz for longer, locally::

    pip install atheris
    python tests/support/fuzz_protocol.py -max_total_time=300 [CORPUS_DIR]

Every input is split into a text or a binary client message, fed to what the server's reader
calls first (``parse_text`` / ``validate_audio``); anything but a documented ``ProtocolError``
is a crash that libFuzzer reports with the input that caused it.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import atheris

with atheris.instrument_imports():
    from speechpipe.transport.protocol import (
        MAX_MESSAGE_BYTES,
        ProtocolError,
        parse_text,
        validate_audio,
    )
    from speechpipe.transport.quotas import check_sdp_size

DOCS = Path(__file__).resolve().parents[2] / "docs" / "protocol.md"
_table = DOCS.read_text().split("## Error codes", 1)[1].split("## Close codes", 1)[0]
DOCUMENTED = set(re.findall(r"^\| `([a-z_]+)`", _table, re.MULTILINE)) | set(
    re.findall(r"`([a-z_]+)`, ", _table)
)


def test_one_input(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    kind = fdp.ConsumeIntInRange(0, 2)
    try:
        if kind == 0:
            validate_audio(fdp.ConsumeBytes(fdp.remaining_bytes()), max_bytes=MAX_MESSAGE_BYTES)
        elif kind == 1:
            parse_text(fdp.ConsumeUnicodeNoSurrogates(fdp.remaining_bytes()))
        else:
            message = parse_text(fdp.ConsumeUnicodeNoSurrogates(fdp.remaining_bytes()))
            sdp = getattr(message, "sdp", None)
            if sdp is not None:
                check_sdp_size(sdp, 32 * 1024)
    except ProtocolError as exc:
        if exc.code not in DOCUMENTED:
            raise AssertionError(f"undocumented error code {exc.code!r}") from exc


def main() -> None:
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
