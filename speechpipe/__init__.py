"""speechpipe: streaming speech-to-speech translation.

Kept import-light on purpose: ``speechpipe.errors`` is a leaf every layer imports.
"""

__version__ = "0.1.0"
