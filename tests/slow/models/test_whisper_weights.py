"""The bundled Whisper base folder loads in faster-whisper."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from speechpipe.models.whisper.weights import (
    resolve_whisper_model,
)


@pytest.fixture(scope="module")
def built_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    home = tmp_path_factory.mktemp("home")
    resolve_whisper_model(home=home)
    yield home
    shutil.rmtree(home, ignore_errors=True)


@pytest.fixture(autouse=True)
def _drop_models(tmp_path: Path) -> Iterator[None]:
    """pytest keeps old tmp dirs; don't leave 150 MB models in each on a shared disk."""
    yield
    shutil.rmtree(tmp_path, ignore_errors=True)


def test_faster_whisper_loads_the_folder(built_home: Path) -> None:
    from faster_whisper import WhisperModel

    model = WhisperModel(str(resolve_whisper_model(home=built_home)), compute_type="int8")
    assert model.model.is_multilingual
    assert "es" in model.supported_languages
