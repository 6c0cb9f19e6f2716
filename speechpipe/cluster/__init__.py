"""Scale-out on Ray: many ``speechpipe serve --cluster`` nodes, one admission ledger.

``ledger_core`` is pure (no Ray); ``ledger`` (the Ray actor), ``node`` (a server's link to
the ledger) and ``cli`` import Ray lazily, so plain ``speechpipe serve`` never loads it.
Operators' guide: ``docs/scaling.md``.
"""
