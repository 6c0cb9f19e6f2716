"""The options are leaves: ``import speechpipe.config`` loads the option modules and the
standard library, nothing else (issue 43).

A fresh interpreter imports the tree (nothing this test run imported counts) and reports what
it loaded. Every ``speechpipe`` module it loads must be in ``OPTION_MODULES`` below; a new
import that drags in a stage, a server, numpy or a model engine fails here, naming it. The fix
is to move the option dataclass (or constant) into a leaf module of its own and re-export it
from the old place (as ``stages/vad_options.py`` and ``stages/vad.py`` do), or to import the
heavy module inside the function that needs it.

An engine's options module is allowed through its registry row (``voices.engines.ENGINES``,
``models.mt.backends.MT_BACKENDS``): a new engine adds no line here.
"""

from __future__ import annotations

import json
import subprocess
import sys

# speechpipe modules ``import speechpipe.config`` may load: packages whose ``__init__`` imports
# nothing, the option modules, and the few stdlib-only leaves they name
OPTION_MODULES = frozenset({
    "speechpipe",  # its public names are lazy (PEP 562)
    "speechpipe.config",
    "speechpipe.config_ranges",  # the tables of what each option may be
    "speechpipe.errors",  # the leaf every layer imports
    "speechpipe.cluster",
    "speechpipe.cluster.options",
    "speechpipe.models",
    "speechpipe.models.mt",
    "speechpipe.models.workers",
    "speechpipe.models.mt.backends",  # the table of text-MT backends: their options groups
    "speechpipe.models.workers.batch_options",
    "speechpipe.server",
    "speechpipe.server.options",
    "speechpipe.stages",
    "speechpipe.stages.asr_options",
    "speechpipe.stages.catch_up_options",
    "speechpipe.stages.faithfulness_options",
    "speechpipe.stages.ladder",  # the degrade ladder's levels (DegradeOptions.max_level)
    "speechpipe.stages.phrase_options",
    "speechpipe.stages.text_mt_options",
    "speechpipe.stages.vad_options",
    "speechpipe.transport",
    "speechpipe.transport.identity",  # the TokenVerifier seam that ServerLimits.auth names
    "speechpipe.transport.limits",
    "speechpipe.voices",  # its public names are lazy (PEP 562)
    "speechpipe.voices.engines",  # the table of TTS engines: their options groups
})


def engine_option_modules() -> frozenset[str]:
    """The leaf modules the engines' rows name for their options."""
    from speechpipe.models.mt.backends import MT_BACKENDS
    from speechpipe.voices.engines import ENGINES

    return frozenset(entry.options.partition(":")[0]
                     for entry in (*ENGINES.values(), *MT_BACKENDS.values()) if entry.options)

# third-party libraries and heavy modules of the package, named for a clearer failure (the
# allow-list above catches every speechpipe module already)
HEAVY = ("numpy", "asyncio", "websockets", "aiortc", "faster_whisper", "ctranslate2",
         "onnxruntime", "piper", "webrtcvad", "soundfile", "soxr", "sentencepiece", "ray",
         "jwt", "prometheus_client", "platformdirs", "speechpipe.session",
         "speechpipe.server.serve", "speechpipe.server.admission", "speechpipe.stages.frames",
         "speechpipe.transport.protocol", "speechpipe.voices.registry")

_PROBE = ("import json, sys; before = set(sys.modules); import speechpipe.config; "
          "print(json.dumps(sorted(set(sys.modules) - before)))")


def loaded_by_the_options_tree() -> list[str]:
    """The modules a fresh interpreter loads for ``import speechpipe.config``."""
    out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True,
                         timeout=60, check=True)
    return list(json.loads(out.stdout))


def test_the_options_tree_loads_only_option_modules() -> None:
    loaded = loaded_by_the_options_tree()
    assert "speechpipe.config" in loaded and "speechpipe.server.options" in loaded
    heavy = sorted(m for m in loaded
                   if m in HEAVY or m.startswith(tuple(h + "." for h in HEAVY)))
    assert not heavy, (
        f"import speechpipe.config loads {', '.join(heavy)}: an option module imports a heavy "
        "one (move the option into a leaf module, or import lazily; see this module's docstring)"
    )
    others = sorted(m for m in loaded if m.split(".")[0] == "speechpipe"
                    and m not in OPTION_MODULES | engine_option_modules())
    assert not others, (
        f"import speechpipe.config loads {', '.join(others)}, not an option module: move the "
        "option it is imported for into a leaf module, or, for a new stdlib-only option "
        "module, add it to OPTION_MODULES"
    )
