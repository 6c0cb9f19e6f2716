from speechpipe.stages.agreement import LocalAgreement, normalize_word


def test_commits_only_what_two_hypotheses_agree_on():
    la = LocalAgreement(2)
    assert la.update("the little".split()) == []
    assert la.tentative_text == "the little"
    assert la.update("the little prince".split()) == ["the", "little"]
    assert la.committed_text == "the little"
    assert la.tentative_text == "prince"


def test_continuations_after_a_commit_align_with_the_new_prefix():
    la = LocalAgreement(2)
    la.update("so the".split())
    la.update("so the main".split())  # commits "so the"
    assert la.update("little prince decided".split()) == []  # "main" vs "little": no agreement
    assert la.update("little prince decided to".split()) == ["little", "prince", "decided"]
    assert la.committed_text == "so the little prince decided"


def test_comparison_ignores_case_and_punctuation_and_takes_the_newest_form():
    la = LocalAgreement(2)
    la.update(["planeta"])
    assert la.update(["Planeta,", "y"]) == ["Planeta,"]


def test_committed_words_are_never_retracted():
    la = LocalAgreement(2)
    history = []
    for hypothesis in ["a", "a b", "a b c", "x y", "a b c d", "a b c d e"]:
        la.update(hypothesis.split()[len(la.committed):] if hypothesis.startswith("a") else
                  hypothesis.split())
        history.append(list(la.committed))
    for before, after in zip(history, history[1:], strict=False):
        assert after[: len(before)] == before


def test_finalize_commits_the_given_continuation():
    la = LocalAgreement(2)
    la.update(["hola"])
    assert la.finalize(["hola", "mundo"]) == ["hola", "mundo"]
    assert la.committed_text == "hola mundo"
    assert la.tentative == []


def test_glue_appends_punctuation_but_refuses_letters():
    la = LocalAgreement(2)
    la.finalize(["limitaciones"])
    assert la.glue(".") is True
    assert la.committed_text == "limitaciones."
    assert la.glue("ions") is False
    assert la.committed_text == "limitaciones."


def test_normalize_word():
    assert normalize_word("¿Qué?") == "qué"
    assert normalize_word("don't") == "don't"


def test_lookback_lets_one_bad_hypothesis_in_between_not_stall_commits():
    plain, looking = LocalAgreement(2), LocalAgreement(2, lookback=2)
    hypotheses = ["institutional aspect", "central aspect of the system",
                  "institutional aspect is the balance"]
    for h in hypotheses:
        plain.update(h.split())
        looking.update(h.split())
    assert plain.committed == []
    assert looking.committed_text == "institutional aspect"
    assert looking.tentative_text == "is the balance"


def test_lookback_still_needs_two_agreeing_hypotheses():
    la = LocalAgreement(2, lookback=2)
    for h in ["a b", "c d", "e f"]:
        assert la.update(h.split()) == []
