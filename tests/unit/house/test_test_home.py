"""The test run's own ``SPEECHPIPE_HOME`` (tests/conftest.py): models, kept-token sets and
registries the tests make land in a temporary folder, never in the user's cache."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import platformdirs

from speechpipe.models.home import speechpipe_home


def test_the_run_has_a_temporary_home_of_its_own():
    home = speechpipe_home()
    assert Path(os.environ["SPEECHPIPE_HOME"]) == home
    assert home.is_relative_to(tempfile.gettempdir()), home
    assert home.name.startswith("speechpipe-test-home-")
    assert not home.is_relative_to(platformdirs.user_cache_dir("speechpipe"))


def test_a_bundled_model_resolved_in_a_test_is_in_that_home():
    from speechpipe.models.whisper.weights import resolve_whisper_model

    assert resolve_whisper_model().is_relative_to(speechpipe_home())
