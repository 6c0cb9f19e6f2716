"""The server application: ``speechpipe serve``, admission control, the degrade ladder, load
control, Prometheus metrics and the public-serving security options."""
