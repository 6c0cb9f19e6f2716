"""speechpipe's exception tree. A leaf module: every layer may import it.

::

    SpeechpipeError                 base of everything speechpipe raises on purpose
    ├── InputError                  bad input from a user: a file, a flag, a message
    │   ├── AudioInputError         unreadable, empty or malformed audio
    │   └── LanguageError           unknown or unsupported language code / pair
    ├── ModelError                  weights missing, corrupt, or of the wrong kind
    │   ├── UnknownModelError       the model asked for (a name, a path) is not there
    │   │                           (also an InputError)
    │   └── VoiceError              no usable Piper voice (lists the available ones)
    │       ├── UnknownVoiceError   the voice asked for is not there (also an InputError)
    │       └── UnsafeVoiceError    a voice file with a value no engine may be given: an
    │                               espeak-ng voice that is a path, a sample rate out of
    │                               range (also an InputError)
    ├── SessionError                a session cannot start or must end (carries a code)
    │   └── AdmissionError          over capacity (carries a retry hint)
    │       └── SessionRedirect     cluster: admitted on another node (URL + ticket)
    ├── WorkerError                 a model worker failed on one request (recoverable)
    │   ├── WorkerTimeout           its call passed the worker's deadline: abandoned
    │   └── WorkerUnavailable       the worker's breaker is open: refused at once
    │                               (also an AdmissionError: at ``start``, close 1013)
    ├── OutputError                 an output file could not be written (disk full, device)
    └── Superseded                  a queued partial decode was replaced by a newer request
                                    for the same utterance: not an error, the caller skips it

Recoverable errors reach a client as an ``ErrorEvent`` and its session continues; fatal ones
end the session with a documented close code (see ``docs/protocol.md``). The CLI turns any
``SpeechpipeError`` into one line on stderr and a non-zero exit.
"""

from __future__ import annotations

__all__ = [
    "SpeechpipeError",
    "InputError",
    "AudioInputError",
    "LanguageError",
    "ModelError",
    "UnknownModelError",
    "VoiceError",
    "UnknownVoiceError",
    "UnsafeVoiceError",
    "SessionError",
    "AdmissionError",
    "SessionRedirect",
    "WorkerError",
    "WorkerTimeout",
    "WorkerUnavailable",
    "OutputError",
    "Superseded",
    "echoed",
    "ECHO_CHARS",
]


class SpeechpipeError(Exception):
    """Base class; ``code`` is a short machine-readable name used in error events."""

    code = "error"


class InputError(SpeechpipeError):
    """Bad input from the user or a client (exit code 2 at the CLI)."""
    code = "bad_input"


class AudioInputError(InputError):
    """Audio that cannot be read or used."""
    code = "bad_audio"


class LanguageError(InputError):
    """A language that the models or the voices do not support."""
    code = "unsupported_language"


class ModelError(SpeechpipeError):
    """A model that cannot be found, assembled or loaded."""
    code = "model_error"


class UnknownModelError(ModelError, InputError):
    """The model asked for (``--mt ct2:NAME``, ``--asr-model``, a folder) does not exist: bad
    input (exit code 2), where a damaged or misregistered installed model is a ``ModelError``
    (exit code 1)."""
    code = "model_error"


class VoiceError(ModelError):
    """A Piper voice that cannot be found or loaded."""
    code = "no_voice"


class UnknownVoiceError(VoiceError, InputError):
    """The voice asked for (a name, or any voice for a language) is not installed: bad input
    (exit code 2), where a broken installed voice is a ``VoiceError`` (exit code 1)."""
    code = "no_voice"


class UnsafeVoiceError(VoiceError, InputError):
    """A voice file names what must never reach its engine (an espeak-ng voice that is a path,
    a sample rate or scale out of range): refused where the file is read, bad input (exit
    code 2), never loaded."""
    code = "no_voice"


class SessionError(SpeechpipeError):
    """A session that cannot start or go on (carries a protocol error ``code``)."""
    code = "session_error"

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code


class AdmissionError(SessionError):
    """A session refused by admission control (carries ``retry_after_s``)."""
    code = "over_capacity"

    def __init__(self, message: str, *, retry_after_s: float) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class SessionRedirect(AdmissionError):
    """Cluster mode: a slot is reserved for this session on another node (close 4020)."""

    code = "redirect"

    def __init__(self, message: str, *, url: str, ticket: str, expires_in_s: float) -> None:
        super().__init__(message, retry_after_s=0.0)
        self.url = url
        self.ticket = ticket
        self.expires_in_s = expires_in_s


class WorkerError(SpeechpipeError):
    """A shared model worker failed a request (only that request fails)."""
    code = "worker_error"


class WorkerTimeout(WorkerError):
    """A worker call passed its deadline (``models.workers.guard``) and was abandoned for its
    caller; the session goes on with the next utterance."""
    code = "worker_timeout"


class WorkerUnavailable(WorkerError, AdmissionError):
    """A shared worker's circuit breaker is open: new work is refused at once instead of
    queueing behind a broken worker (carries ``retry_after_s``). Mid-session: an error event,
    the session goes on; at ``start``: close 1013, as over capacity."""
    code = "worker_unavailable"

    def __init__(self, message: str, *, retry_after_s: float) -> None:
        AdmissionError.__init__(self, message, retry_after_s=retry_after_s)


class OutputError(SpeechpipeError):
    """An output file could not be written (disk full, device)."""
    code = "output_error"


class Superseded(SpeechpipeError):
    """Raised to the caller of a queued partial decode that a newer request replaced (or that
    was withdrawn) before it was computed. Stages treat it as "skip", never as an error event."""

    code = "superseded"


ECHO_CHARS = 80  # the most of a value a refusal repeats


def echoed(value: object, limit: int = ECHO_CHARS, *, quote: bool = True) -> str:
    """A value as a refusal repeats it: its ``repr`` (``quote=False``: its text, unless it
    holds what does not print), cut to ``limit`` characters with an ellipsis, so a refusal
    stays one short line whatever it was given (a 200 kB ``--set`` value, a TOML key of 100k
    characters)."""
    if isinstance(value, str) and len(value) > 4 * limit:
        value = value[: 4 * limit]  # no repr of all of it, only of what is shown
    elif not isinstance(value, str):
        value = value if quote else str(value)
    text = repr(value) if quote or not str(value).isprintable() else str(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"
