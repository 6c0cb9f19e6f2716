"""``DecodeKind``: a str enum, so the kinds the stages compare as strings keep working."""

from speechpipe.stages.model_api import DecodeKind


def test_each_kind_equals_its_string():
    assert [k.value for k in DecodeKind] == ["final", "pause", "cut", "hush", "partial"]
    for kind in DecodeKind:
        assert kind == kind.value and isinstance(kind, str)
        assert str(kind) == f"{kind}" == kind.value  # logs and f-strings show the plain word
        assert DecodeKind(kind.value) is kind
    assert DecodeKind.PARTIAL in ("partial", "hush")
    assert {"final": 1}[DecodeKind.FINAL] == 1  # the same hash as the string
