"""The batch planner groups a bucket's decodes by what a ``generate`` call shares (decoder,
beam size, context length, max_length, prefill), from each request alone: no model, no
tokenizer, no socket (prompts are made-up token ids of the right lengths)."""

from __future__ import annotations

import numpy as np

from speechpipe.models.whisper.batch_plan import (
    MAX_LENGTH_STEP,
    SAMPLE_RATE,
    GroupKey,
    Prompt,
    generate_max_length,
    new_tokens,
    plan_batch,
)
from speechpipe.stages.model_api import DecodeTask, WhisperRequest

BOTH = (DecodeTask("transcribe"), DecodeTask("translate"))


def request(seconds: float = 1.0, tasks: tuple[DecodeTask, ...] = BOTH,
            **fields: object) -> WhisperRequest:
    audio = np.zeros(int(seconds * SAMPLE_RATE), np.float32)
    return WhisperRequest(audio=audio, language="es", tasks=tasks, **fields)  # type: ignore[arg-type]


def prompts(req: WhisperRequest, n_prefix: dict[str, int] | None = None,
            n_context: int = 0) -> list[Prompt]:
    """Prompts as the engine builds them: context, 4 sot tokens, the forced prefix."""
    n_prefix = n_prefix or {}
    out = []
    for task in req.tasks:
        k = n_prefix.get(task.task, 0)
        out.append(Prompt(task, list(range(n_context + 4 + k)), k, n_context))
    return out


def plan(requests, n_prefix=None, n_context=None, restricted=None, prefill=False,
         languages=None):
    n_prefix = n_prefix or [None] * len(requests)
    n_context = n_context or [0] * len(requests)
    return plan_batch(requests, languages or ["es"] * len(requests),
                      [prompts(r, p, c) for r, p, c in zip(requests, n_prefix, n_context,
                                                           strict=True)],
                      restricted or [False] * len(requests), prefill)


def test_the_tasks_of_a_request_share_one_call_in_task_order():
    r = request()
    result = plan([r])
    assert [(item.row, item.task.task) for item in result.items] == [
        (0, "transcribe"), (0, "translate")]
    assert list(result.groups.values()) == [[0, 1]]
    # 1 s at 7 tokens a second: 4 + 7 new tokens; max_length 2 * 11 = 22, in steps of 4
    assert [item.new_tokens for item in result.items] == [11, 11]
    assert list(result.groups) == [GroupKey("", 0, 1, 0, 24, 0)]
    assert {item.max_length for item in result.items} == {24}


def test_max_length_is_the_largest_a_requests_tasks_need():
    r = request(tasks=(DecodeTask("transcribe"), DecodeTask("translate", "hola hola")))
    result = plan([r], n_prefix=[{"translate": 2}])
    # transcribe: 11 tokens (22); translate: 2 forced + 11 new (26): both get 28
    assert [item.max_length for item in result.items] == [28, 28]
    assert len(result.groups) == 1


def test_requests_share_a_call_only_when_everything_it_shares_matches():
    same = [request(), request()]
    assert list(plan(same).groups.values()) == [[0, 1, 2, 3]]
    beams = plan([request(), request(beam_size=2)])
    assert [key.beam_size for key in beams.groups] == [1, 2]
    assert list(beams.groups.values()) == [[0, 1], [2, 3]]
    contexts = plan([request(), request()], n_context=[0, 9])
    assert [key.n_context for key in contexts.groups] == [0, 9]
    longer = plan([request(1.0), request(3.0)])
    assert [key.max_length for key in longer.groups] == [24, 52]
    # lengths within one step of MAX_LENGTH_STEP share a call
    close = plan([request(1.0), request(1.1)])
    assert MAX_LENGTH_STEP == 4 and len(close.groups) == 1


def test_the_full_vocabulary_is_one_decoder_for_every_language():
    result = plan([request(), request()], languages=["es", "fr"])
    assert list(result.groups) == [GroupKey("", 0, 1, 0, 24, 0)]
    # vocabulary_words without a restriction (none for the language): the full decoder too
    unrestricted = plan([request(vocabulary_words=500), request()], languages=["es", "fr"])
    assert len(unrestricted.groups) == 1


def test_a_restricted_decoder_is_one_per_language_and_word_count():
    requests = [request(vocabulary_words=500), request(vocabulary_words=500),
                request(vocabulary_words=500), request(vocabulary_words=800), request()]
    result = plan(requests, languages=["es", "fr", "es", "es", "es"],
                  restricted=[True, True, True, True, False])
    assert [(key.decoder_language, key.words) for key in result.groups] == [
        ("es", 500), ("fr", 500), ("es", 800), ("", 0)]
    assert list(result.groups.values()) == [[0, 1, 4, 5], [2, 3], [6, 7], [8, 9]]


def test_prefill_reads_a_prefix_per_request_and_only_when_asked():
    tasks = (DecodeTask("transcribe", "a b c d e"), DecodeTask("translate", "a b c"))
    lengths = {"transcribe": 5, "translate": 3}
    asked = request(tasks=tasks, prefill=True)
    # the shortest prefix less one token (left to be forced), for both tasks
    result = plan([asked], n_prefix=[lengths], prefill=True)
    assert [item.prefilled for item in result.items] == [2, 2]
    assert [key.prefilled for key in result.groups] == [2]
    # no native prompt pass, or a request that does not ask: nothing read at once
    assert {i.prefilled for i in plan([asked], n_prefix=[lengths]).items} == {0}
    not_asked = request(tasks=tasks)
    assert {i.prefilled for i in plan([not_asked], n_prefix=[lengths], prefill=True).items} \
        == {0}
    # an empty prefix reads nothing
    empty = request(prefill=True)
    assert {i.prefilled for i in plan([empty], prefill=True).items} == {0}
    # different counts never share a call
    mixed = plan([asked, not_asked], n_prefix=[lengths, lengths], prefill=True)
    assert [key.prefilled for key in mixed.groups] == [2, 0]


def test_items_carry_their_prompt_and_counts():
    r = request(tasks=(DecodeTask("translate", "hola"),))
    result = plan([r], n_prefix=[{"translate": 1}], n_context=[8])
    (item,) = result.items
    assert item.prompt == list(range(8 + 4 + 1))
    assert (item.n_prefix, item.n_context, item.new_tokens) == (1, 8, 11)
    assert item.max_length == 24  # max(2 * 12, 12 + 8 + 3) = 24


def test_max_length_never_exceeds_whispers_448():
    long = plan([request(60.0)])
    assert {key.max_length for key in long.groups} == {448}
    assert generate_max_length(300, 0) == 448


def test_new_tokens_and_generate_max_length():
    assert new_tokens(request(2.0)) == 4 + 14
    assert new_tokens(request(2.0, cap_by_window=True), prefix_tokens=10) == 8
    assert new_tokens(request(2.0, cap_by_window=True), prefix_tokens=30) == 4
    assert new_tokens(request(2.0, max_new_tokens=6)) == 6
    assert new_tokens(request(2.0), prefix_tokens=30) == 18  # not capped by the window
    # min(L // 2, L - context - 3) tokens come back: both bounds
    assert generate_max_length(10, 0) == 20
    assert generate_max_length(10, 20) == 33
