"""The espeak-ng engine in fresh processes: the engine table and the voice listing load no
library, and without the wheel Debian's ``libespeak-ng1`` speaks."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from speechpipe.voices.espeak_library import espeak_install
from speechpipe.voices.registry import (
    LANGUAGES_INSTALL,
)

needs_espeak = pytest.mark.skipif(
    espeak_install() is None,
    reason=f"espeak-ng is not installed ({LANGUAGES_INSTALL}, or apt-get install libespeak-ng1)",
)
pytestmark = needs_espeak


@pytest.fixture(autouse=True)
def empty_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Keep the user's own voices folder out of these tests."""
    home = tmp_path / "home"
    monkeypatch.setenv("SPEECHPIPE_HOME", str(home))
    return home


def test_the_table_and_the_listing_load_no_library() -> None:
    """Importing the engine table imports no engine; listing voices reads espeak-ng's data
    folder but neither loads nor initializes the library (a fresh process)."""
    code = (
        "import sys\n"
        "import speechpipe.voices.engines\n"
        "assert 'speechpipe.voices.espeak_engine' not in sys.modules\n"
        "from speechpipe.voices.registry import list_voices\n"
        "assert any(v.engine == 'espeak-ng' for v in list_voices())\n"
        "from speechpipe.voices import espeak_library\n"
        "assert espeak_library._LIBRARY == []\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr


def test_the_system_library_is_the_fallback() -> None:
    """Without the wheel, Debian's ``libespeak-ng1`` speaks (a fresh process: the library is
    process-wide)."""
    import ctypes.util

    if not ctypes.util.find_library("espeak-ng"):
        pytest.skip("Debian's libespeak-ng1 is not installed")
    code = (
        "import sys\n"
        "sys.modules['espeakng_loader'] = None  # as if the wheel were not installed\n"
        "from speechpipe.voices.espeak_library import espeak_install\n"
        "from speechpipe.voices.engines import load_synthesizer\n"
        "from speechpipe.voices.registry import resolve_voice\n"
        "assert espeak_install().origin == 'system', espeak_install()\n"
        "voice = resolve_voice(None, 'es')\n"
        "speech = load_synthesizer(voice).synthesize('Hola, buenos días.')\n"
        "print(voice.name, len(speech))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    name, samples = result.stdout.split()
    assert name == "espeak-ng-es" and int(samples) > 11_000 and result.stderr == ""
