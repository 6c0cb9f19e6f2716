"""The options' old places still export them (issue 43; that ``import speechpipe.config``
loads only the option modules is checked in a fresh interpreter: the cli tier)."""

from __future__ import annotations


def test_the_old_places_still_export_the_options() -> None:
    """The options moved to leaf modules are still importable from where they were."""
    import speechpipe.voices
    from speechpipe.server import admission, degrade, options
    from speechpipe.stages import (
        asr_options,
        catch_up_options,
        commit,
        faithfulness,
        faithfulness_options,
        phrase_options,
        phrases,
        text_mt,
        text_mt_options,
        tts,
        vad,
        vad_options,
    )
    from speechpipe.transport import auth, identity, limits, protocol
    from speechpipe.voices import piper_engine, piper_options

    assert admission.AdmissionOptions is options.AdmissionOptions
    assert degrade.DegradeOptions is options.DegradeOptions
    assert commit.CommitPolicyName is asr_options.CommitPolicyName
    assert faithfulness.FaithfulnessOptions is faithfulness_options.FaithfulnessOptions
    assert phrases.PhraseOptions is phrase_options.PhraseOptions
    assert phrases.CONTINUATION_TAIL_S == phrase_options.CONTINUATION_TAIL_S
    assert text_mt.TextMtOptions is text_mt_options.TextMtOptions
    assert tts.CatchUpOptions is catch_up_options.CatchUpOptions
    assert vad.VadOptions is vad_options.VadOptions
    assert auth.Identity is identity.Identity and auth.TokenVerifier is identity.TokenVerifier
    assert protocol.MAX_MESSAGE_BYTES == limits.MAX_MESSAGE_BYTES == 1 << 17
    assert piper_engine.PiperOptions is piper_options.PiperOptions
    assert speechpipe.voices.PiperOptions is piper_options.PiperOptions
    assert speechpipe.voices.PiperSynthesizer is piper_engine.PiperSynthesizer
    for name in speechpipe.voices.__all__:
        assert getattr(speechpipe.voices, name) is not None, name
