"""``models/hub/guard.py``: the hub's answers that huggingface_hub would turn into paths, checked
on plain ``requests`` responses (the loopback hub in ``tests/cli/models_cli/test_models_pull.py``
runs the same checks through the real client)."""

from __future__ import annotations

import pytest

from speechpipe.models.hub.guard import UnsafeHubAnswer, _ResponseCheck, answered, shown

requests = pytest.importorskip("requests")

SHA1 = "0123456789abcdef0123456789abcdef01234567"
SHA256 = SHA1[:32] * 2


def answer(method: str, status: int, headers: dict[str, str],
           url: str = "https://hub.test/a/b/resolve/main/config.json") -> requests.Response:
    response = requests.Response()
    response.status_code = status
    response.headers.update(headers)
    response.url = url
    response.request = requests.Request(method, url).prepare()
    return response


@pytest.mark.parametrize("headers", [
    {"ETag": '"../../x"', "X-Repo-Commit": SHA1},
    {"ETag": f'"{SHA1}"', "X-Linked-Etag": '"/etc/hostname"', "X-Repo-Commit": SHA1},
    {"ETag": f'"{SHA1}"', "X-Repo-Commit": "../" + SHA1},
    {"ETag": f'"{SHA1}"', "X-Repo-Commit": SHA1, "X-Xet-Hash": "../" + SHA256},
])
def test_a_path_in_a_head_answer_is_refused(headers: dict[str, str]) -> None:
    with pytest.raises(UnsafeHubAnswer):
        _ResponseCheck()(answer("HEAD", 200, headers))


@pytest.mark.parametrize("headers", [
    {"ETag": f'W/"{SHA1}"', "X-Repo-Commit": SHA1},
    {"ETag": '"a-weak-express-etag"', "X-Linked-Etag": f'"{SHA256}"', "X-Repo-Commit": SHA1},
])
def test_the_hubs_own_answers_pass(headers: dict[str, str]) -> None:
    check = _ResponseCheck()
    check(answer("HEAD", 200, headers))
    check(answer("HEAD", 404, {"ETag": 'W/"2f-abc"'}))  # an error's ETag is never a path
    check(answer("GET", 200, {"ETag": '"s3-multipart-3"'}))  # nor a download's


def test_a_commit_in_the_repo_info_is_checked() -> None:
    info = answer("GET", 200, {"Content-Type": "application/json"},
                  url="https://hub.test/api/models/a/b/revision/main")
    info._content = b'{"sha": "../../x", "siblings": []}'
    with pytest.raises(UnsafeHubAnswer):
        _ResponseCheck()(info)
    info._content = f'{{"sha": "{SHA1}"}}'.encode()
    _ResponseCheck()(info)


def test_a_failing_hub_is_retried_once_then_said_in_a_few_words() -> None:
    check = _ResponseCheck()
    failing = answer("HEAD", 503, {})
    failing.reason = "Service Unavailable"
    assert check(failing) is failing  # the client's first retry
    with pytest.raises(requests.HTTPError) as info:
        check(failing)
    assert str(info.value) == answered(failing) == (
        "the hub answered HTTP 503 Service Unavailable to HEAD /a/b/resolve/main/config.json")


def test_shown_caps_a_value() -> None:
    assert shown("es") == "'es'"
    assert len(shown("x" * 10_000)) == 80 and shown("x" * 10_000).endswith("…")
    assert shown("a\nb", quote=False) == "'a\\nb'"
