"""Pipeline stages (VAD, ASR, MT, TTS) and their shared vocabulary (frames, channels)."""
