"""The edges: file replay, WebSocket server, WebRTC. Handed a session factory; never imports
``speechpipe``'s application modules (only ``speechpipe.errors`` and ``speechpipe.stages``)."""
