"""Benchmarks behind ``speechpipe bench``: load (concurrent sessions), soak (long-running
leaks) and mt (incremental text-MT cost)."""
