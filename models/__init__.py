"""Model weights and inference engines: resolve, load, run (off the event loop)."""
