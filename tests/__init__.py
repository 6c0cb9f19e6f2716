"""speechpipe tests, by layer (see the README)."""
