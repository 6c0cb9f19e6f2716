"""espeak-ng in-process, through ctypes: where it is installed, and one process-wide instance.

The library comes from the PyPI wheel ``espeakng-loader`` (``pip install
'speechpipe[languages]'``: the shared library and its data, nothing to download), else from
Debian's ``libespeak-ng1`` with its ``espeak-ng-data``. espeak-ng keeps all its state in
globals (the voice, the rate, the output callback), so the process initializes it once and
holds one lock around every call: syntheses from several threads run one after another (a
sentence takes a few milliseconds).

Nothing is printed: the ``espeak_ng_*`` calls return their status instead of writing it to
stderr (``espeak_Initialize`` prints), the catalogue offers only voices whose dictionary is
present (a missing one is reported on stderr), and the audio callback never raises.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import sysconfig
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from speechpipe.errors import ModelError, VoiceError

__all__ = ["EspeakInstall", "EspeakLibrary", "espeak_install", "espeak_library",
           "INSTALL_HINT", "DEFAULT_RATE_WPM", "MIN_RATE_WPM", "MAX_RATE_WPM"]

INSTALL_HINT = "pip install 'speechpipe[languages]'"
DEFAULT_RATE_WPM = 175  # espeakRATE_NORMAL
MIN_RATE_WPM, MAX_RATE_WPM = 80, 450  # espeakRATE_MINIMUM, espeakRATE_MAXIMUM

_OUTPUT_SYNCHRONOUS = 0x0001  # ENOUTPUT_MODE_SYNCHRONOUS: audio to the callback, no device
_RATE = 1  # espeakRATE
_POS_CHARACTER = 1
_CHARS_UTF8 = 1  # espeakCHARS_UTF8 (no SSML, no phoneme input)
_SYNTH_CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_short), ctypes.c_int,
                                   ctypes.c_void_p)


@dataclass(frozen=True, slots=True)
class EspeakInstall:
    """An espeak-ng to use: its shared library and its ``espeak-ng-data`` folder."""

    library: str
    data: Path
    origin: str  # "espeakng-loader" (the wheel) or "system"


def _is_data(folder: Path) -> bool:
    return (folder / "phontab").is_file() and (folder / "lang").is_dir()


def _system_data() -> Path | None:
    """Debian's ``espeak-ng-data`` (or one named by ``ESPEAK_DATA_PATH``, as the library
    itself reads it)."""
    env = os.environ.get("ESPEAK_DATA_PATH")
    multiarch = sysconfig.get_config_var("MULTIARCH") or ""
    candidates = [*([Path(env) / "espeak-ng-data", Path(env)] if env else []),
                  *([Path("/usr/lib") / multiarch / "espeak-ng-data"] if multiarch else []),
                  Path("/usr/lib/espeak-ng-data"), Path("/usr/share/espeak-ng-data"),
                  Path("/usr/local/share/espeak-ng-data")]
    return next((folder for folder in candidates if _is_data(folder)), None)


@functools.cache
def espeak_install() -> EspeakInstall | None:
    """The wheel's espeak-ng, else the system's; None when neither is installed (read once
    per process)."""
    try:
        import espeakng_loader  # type: ignore[import-untyped, import-not-found, unused-ignore]
    except ImportError:
        pass
    else:
        try:
            library, data = espeakng_loader.get_library_path(), espeakng_loader.get_data_path()
        except (OSError, RuntimeError):
            pass
        else:
            if Path(library).is_file() and _is_data(Path(data)):
                return EspeakInstall(library, Path(data), "espeakng-loader")
    name = ctypes.util.find_library("espeak-ng")
    data_folder = _system_data() if name else None
    if name and data_folder is not None:
        return EspeakInstall(name, data_folder, "system")
    return None


class EspeakLibrary:
    """The process's one initialized espeak-ng; every call holds ``lock``."""

    lock = threading.Lock()

    def __init__(self, install: EspeakInstall) -> None:
        self.install = install
        try:
            lib = ctypes.CDLL(install.library)
        except OSError as exc:
            raise ModelError(f"cannot load espeak-ng ({install.library}): {exc}") from None
        lib.espeak_ng_InitializePath.argtypes = [ctypes.c_char_p]
        lib.espeak_ng_Initialize.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
        lib.espeak_ng_InitializeOutput.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_char_p]
        lib.espeak_ng_ClearErrorContext.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
        lib.espeak_SetSynthCallback.argtypes = [_SYNTH_CALLBACK]
        lib.espeak_SetVoiceByName.argtypes = [ctypes.c_char_p]
        lib.espeak_SetParameter.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int]
        lib.espeak_Synth.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_uint,
                                     ctypes.c_int, ctypes.c_uint, ctypes.c_uint,
                                     ctypes.c_void_p, ctypes.c_void_p]
        self._lib = lib
        self._chunks: list[bytes] = []
        self._callback = _SYNTH_CALLBACK(self._collect)  # kept: the library holds a pointer
        self._voice = ""
        lib.espeak_ng_InitializePath(os.fsencode(install.data))
        context = ctypes.c_void_p()
        status = lib.espeak_ng_Initialize(ctypes.byref(context))
        if status != 0:
            lib.espeak_ng_ClearErrorContext(ctypes.byref(context))
            raise ModelError(f"espeak-ng cannot read its data in {install.data} "
                             f"(status {status:#x}): reinstall it ({INSTALL_HINT})")
        status = lib.espeak_ng_InitializeOutput(_OUTPUT_SYNCHRONOUS, 0, None)
        if status != 0:
            raise ModelError(f"espeak-ng cannot set up its output (status {status:#x})")
        lib.espeak_SetSynthCallback(self._callback)
        self.sample_rate = int(lib.espeak_ng_GetSampleRate())

    def _collect(self, wav: ctypes._Pointer[ctypes.c_short], count: int,
                 events: int | None) -> int:
        """The audio callback: copies the samples; never raises (ctypes would print it)."""
        try:
            if wav and count > 0:
                self._chunks.append(ctypes.string_at(wav, count * 2))
            return 0
        except BaseException:  # noqa: BLE001 - stop this synthesis rather than print
            return 1

    def check_voice(self, voice: str) -> None:
        """``VoiceError`` unless espeak-ng has ``voice`` (a name, language or file id)."""
        with self.lock:
            self._select(voice)

    def _select(self, voice: str) -> None:
        if voice == self._voice:
            return
        status = self._lib.espeak_SetVoiceByName(voice.encode("utf-8"))
        if status != 0:
            self._voice = ""
            raise VoiceError(f"espeak-ng has no voice {voice!r}")
        self._voice = voice

    def speak(self, voice: str, text: str, rate_wpm: int) -> NDArray[np.int16]:
        """``text`` (already cleaned of control characters) spoken by ``voice`` at
        ``rate_wpm`` words per minute, as int16 samples at ``sample_rate``."""
        data = text.encode("utf-8")
        rate = min(MAX_RATE_WPM, max(MIN_RATE_WPM, int(rate_wpm)))
        with self.lock:
            self._select(voice)
            self._lib.espeak_SetParameter(_RATE, rate, 0)
            self._chunks = []
            try:
                status = self._lib.espeak_Synth(data, len(data) + 1, 0, _POS_CHARACTER, 0,
                                                _CHARS_UTF8, None, None)
                self._lib.espeak_Synchronize()
                chunks = self._chunks
            finally:
                self._chunks = []
        if status != 0:
            raise VoiceError(f"espeak-ng could not speak with voice {voice!r} "
                             f"(status {status:#x})")
        return np.frombuffer(b"".join(chunks), dtype=np.int16).copy()


_LIBRARY: list[EspeakLibrary] = []


def espeak_library() -> EspeakLibrary:
    """The process's espeak-ng, initialized on first use; ``ModelError`` naming the install
    command when it is not installed."""
    with EspeakLibrary.lock:
        if not _LIBRARY:
            install = espeak_install()
            if install is None:
                raise ModelError(f"espeak-ng is not installed: {INSTALL_HINT}")
            _LIBRARY.append(EspeakLibrary(install))
        return _LIBRARY[0]
