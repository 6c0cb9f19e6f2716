"""The loop guard tells a decoder's loop from a speaker who repeats (issue 40)."""

from __future__ import annotations

import numpy as np

from speechpipe.stages.loop_guard import cut_repetition


def _kept(text: str, **kwargs) -> str:
    return " ".join(cut_repetition(text.split(), **kwargs)[0])


def test_a_speakers_repetition_in_the_captions_is_kept():
    for text in ("il faut très très finement le couper",
                 "no, no, no, I said tomorrow",
                 "er ist, er ist nicht gekommen",
                 "je pense je pense que oui"):
        assert cut_repetition(text.split()) == (text.split(), False), text


def test_a_loop_is_still_cut_in_the_captions():
    assert _kept("así así así") == "así"  # runs to the end: a loop in progress
    assert _kept("the rest of the rest of the rest of") == "the rest of"
    assert _kept("no no no no no then") == "no"  # four copies: a loop
    assert _kept("we went there and then we went there and then we") == "we went there and then"


def test_a_translation_may_repeat_where_its_captions_repeat():
    spoken = "non, non, non, je l'ai dit".split()
    assert _kept("no, no, no, I said it", spoken=spoken) == "no, no, no, I said it"
    assert _kept("no, no, no, I said it", spoken="je l'ai dit".split()) == "no,"
    # the captions hold a two-word repetition: a two-word one in the translation is kept
    spoken = "er ist, er ist nicht gekommen".split()
    assert _kept("he is, he is not here", spoken=spoken) == "he is, he is not here"
    # captions without a repetition: today's rule (two copies of a phrase are a loop)
    assert _kept("he is, he is not here", spoken="il n'est pas venu".split()) == "he is,"
    assert _kept("he is, he is not here", spoken=[]) == "he is,"


def test_a_translation_loop_past_what_was_said_is_cut():
    spoken = "très très finement".split()  # two copies said
    assert _kept("very very very finely", spoken=spoken) == "very"


def test_a_final_decode_the_cap_stopped_in_a_restatement_loses_it():
    """es_fisher_2251 ("No, no hace tanto, hace poco."): the final decode ended the sentence,
    said part of it again and ran into the length cap."""
    from speechpipe.stages.loop_guard import cut_capped_restatement, guarded_decode
    from speechpipe.stages.model_api import DecodeTask, WhisperRequest

    words = "No, I don't know so much that little. I don't know so".split()
    assert cut_capped_restatement(words) == (words[:8], True)
    # a new sentence that copies nothing, or one word, or an earlier sentence's opening
    # (the long French recording: two clips open alike), or a finished one, stays
    for text in ("No, I don't know so much. It was last week",
                 "No, I don't know so much that little. Little",
                 "La parole est à madame Annie Louerro. La parole est à madame",
                 "No, I don't know so much that little. I don't know so."):
        assert cut_capped_restatement(text.split()) == (text.split(), False), text
    # the unfinished sentence began in the committed text: not this decode's to cut
    assert cut_capped_restatement("know so".split(), context="I don't know so".split()) == (
        ["know", "so"], False)
    # only a final decode that the cap stopped: one that stopped by itself keeps its words
    # (cut_restatement's rule needs the same start), and a partial's tail is the next
    # decode's to decide (cut_restart)
    text = " ".join(words)
    task = DecodeTask("translate")
    final = WhisperRequest(audio=np.zeros(16000, np.float32), language="es", tasks=(task,))
    partial = WhisperRequest(audio=np.zeros(16000, np.float32), language="es", tasks=(task,),
                             partial=True)
    capped = guarded_decode(final, task, text, -0.3, 0.0, hit_cap=True)
    assert capped.continuation == "No, I don't know so much that little." and capped.cut
    for request, hit_cap in ((final, False), (partial, True)):
        decode = guarded_decode(request, task, text, -0.3, 0.0, hit_cap=hit_cap)
        assert decode.continuation == text and not decode.cut


def test_a_decode_that_says_its_forced_sentence_again_loses_the_second_saying():
    """es_comspeech_9169 and es_mamba_sample3: forced through a half-heard prefix, the
    decode finished the sentence and said it over, right; the prefix is committed, so the
    second saying would only double the speech."""
    from speechpipe.stages.loop_guard import cut_forced_restatement, guard_words

    sentence = ("es profesor peruano de áreas protegidas y manejadas. Primero profesor "
                "peruano de áreas protegidas y manejadas.").split()
    assert cut_forced_restatement(sentence, "Primero que".split()) == (sentence[:8], True)
    clause = "disculpamente y cayó tal vez esperando una disculpamente".split()
    assert cut_forced_restatement(clause, "y cayó tan veces esperando una".split()) == (
        ["disculpamente"], True)
    # the guards a decode goes through run it too
    assert guard_words(clause, "y cayó tan veces esperando una".split(), None, False) == (
        ["disculpamente"], True)
    # real speech: a clause that goes on with new words, a short echo, a sentence that
    # shares only its opening, a restatement of a sentence the committed text had ended
    for context, text in (("and I went to", "the store and I bought milk"),
                          ("I know.", "I know that you know."),
                          ("I", "know. I know that you know it well"),
                          ("We left early.", "We left early and came back late"),
                          ("La parole est à madame Annie Louerro",
                           "La parole est à madame la ministre des Régés."),
                          ("", "we left early. we left early again today")):
        assert cut_forced_restatement(text.split(), context.split()) == (text.split(), False), \
            text


def test_the_restatement_guards_can_be_switched_off_for_a_comparison():
    from speechpipe.stages.loop_guard import guard_words

    clause = "disculpamente y cayó tal vez esperando una disculpamente".split()
    context = "y cayó tan veces esperando una".split()
    assert guard_words(clause, context, None, False, restatement_guard=False) == (
        clause, False)
    capped = "No, I don't know so much that little. I don't know so".split()
    assert guard_words(capped, [], None, False, capped=True)[1]
    assert guard_words(capped, [], None, False, capped=True, restatement_guard=False) == (
        capped, False)


def test_a_new_sentence_after_the_held_full_stop_is_kept():
    """The long French recording: the held full stop comes back glued to the forced prefix
    (". La parole ..."), and the next sentence opens like the last one but ends otherwise:
    a new sentence, not the forced one said again."""
    from speechpipe.stages.loop_guard import guarded_decode
    from speechpipe.stages.model_api import DecodeTask, WhisperRequest

    task = DecodeTask("transcribe", "La parole est à madame Annie Louerro")
    request = WhisperRequest(audio=np.zeros(16000, np.float32), language="fr", tasks=(task,))
    decode = guarded_decode(request, task, ". La parole est à madame la ministre des Régés.",
                            -0.3, 0.0, hit_cap=False)
    assert decode.glued == "."
    assert decode.continuation == "La parole est à madame la ministre des Régés."
    assert not decode.cut
