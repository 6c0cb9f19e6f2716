"""Evaluation: ``speechpipe eval`` over a manifest, the quality and latency scores, and the
per-session event trace."""
