"""Text MT backends: CTranslate2 (Marian/OPUS-MT, NLLB, M2M-100; Argos packages), Apertium,
and the routes between languages."""
