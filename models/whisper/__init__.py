"""Whisper on CTranslate2: weights, prompts, decoders, the engine and its native prefill reader."""
