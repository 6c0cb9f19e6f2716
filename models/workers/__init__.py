"""The shared inference workers (the micro-batching ASR worker), their deadlines and breaker,
and fault injection."""
