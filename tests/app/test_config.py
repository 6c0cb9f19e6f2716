"""One configuration tree: every group reachable with ``--set``, listed by ``speechpipe config``."""

from __future__ import annotations

import dataclasses
import json
import tomllib

import pytest

from speechpipe.cli import PIPELINE_GROUPS, SERVER_GROUPS, build_parser, main
from speechpipe.config import (
    GROUPS,
    Config,
    PipelineOptions,
    apply_overrides,
    config_dict,
    render_config,
    settable_fields,
    with_overrides,
)
from speechpipe.errors import InputError


def _help_of(command: str) -> str:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command").choices[command]
    return " ".join(sub.format_help().split())


def test_cli_group_lists_are_the_tree_groups() -> None:
    listed = [g.strip() for g in f"{PIPELINE_GROUPS}, {SERVER_GROUPS}".split(",")]
    assert sorted(listed) == sorted(GROUPS)
    assert {g.strip() for g in SERVER_GROUPS.split(",")} == {
        g for g, path in GROUPS.items() if path[0] == "server"
    }


@pytest.mark.parametrize("command", ["translate", "eval", "serve", "config"])
def test_set_help_lists_the_groups_the_command_accepts(command: str) -> None:
    text = _help_of(command)
    groups = PIPELINE_GROUPS if command in ("translate", "eval") else (
        f"{PIPELINE_GROUPS}, {SERVER_GROUPS}")
    for group in groups.split(","):
        assert group.strip() in text, (command, group)


def test_every_group_has_settable_leaves_and_each_takes_a_value() -> None:
    config = Config()
    for group, path in GROUPS.items():
        section = config
        for name in path:
            section = getattr(section, name)
        fields = settable_fields(section)
        assert fields, group
        for name in fields:
            value = getattr(section, name)
            text = ",".join(map(str, value)) if isinstance(value, tuple) else (
                "none" if value is None else str(value))
            again = apply_overrides(config, [f"{group}.{name}={text}"])
            assert again == config, (group, name, text)  # its own value round-trips


def test_overrides_land_in_the_tree() -> None:
    config = apply_overrides(Config(), [
        "asr.step_s=0.5", "catch_up.speeds=1.1,1.2", "admission.capacity=3",
        "quotas.max_idle_s=off", "limits.ping_interval_s=none", "load.tick_s=0.25",
        "degrade.up_after_s=3", "text_mt.agreement=3", "pipeline.blas_threads=2",
    ])
    assert config.pipeline.asr.step_s == 0.5
    assert config.pipeline.catch_up.speeds == (1.1, 1.2)
    assert config.server.load.admission.capacity == 3
    assert config.server.limits.quotas.max_idle_s is None
    assert config.server.limits.ping_interval_s is None
    assert config.server.load.tick_s == 0.25
    assert config.server.load.degrade.up_after_s == 3.0
    assert config.pipeline.text_mt.agreement == 3
    assert config.pipeline.blas_threads == 2


@pytest.mark.parametrize(("override", "message"), [
    ("nope.x=1", "expected GROUP.FIELD=VALUE"),
    ("asr.nope=1", "asr has no option 'nope'"),
    ("asr.step_s=fast", "'fast' is not a float"),
    ("admission.capacity=0", "capacity must be >= 1"),
    ("pipeline.vad=1", "vad is not a single value"),
    ("asr.step_s", "expected GROUP.FIELD=VALUE"),
])
def test_bad_overrides_say_what_was_wrong(override: str, message: str) -> None:
    with pytest.raises(InputError, match=message):
        apply_overrides(Config(), [override])


def test_pipeline_commands_refuse_server_groups() -> None:
    with pytest.raises(InputError, match="apply to `speechpipe serve` only"):
        with_overrides(PipelineOptions(), ["admission.capacity=2"])
    assert with_overrides(PipelineOptions(), ["vad.pause_ms=300"]).vad.pause_ms == 300


def test_rendered_tree_parses_back_to_the_same_values() -> None:
    config = apply_overrides(Config(), ["admission.capacity=5", "batching.enabled=false"])
    tree = config_dict(config)
    assert json.loads(render_config(config, "json")) == tree
    parsed = tomllib.loads(render_config(config, "toml"))

    def without_none(node: dict) -> dict:
        return {k: without_none(v) if isinstance(v, dict) else v
                for k, v in node.items() if v is not None}

    assert parsed == without_none(tree)
    assert parsed["server"]["load"]["admission"]["capacity"] == 5
    assert parsed["pipeline"]["batching"]["enabled"] is False


def test_config_command_prints_the_effective_tree(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "--format", "json", "--capacity", "3",
                 "--set", "asr.step_s=0.75", "--set", "quotas.max_sdp_bytes=4096"]) == 0
    tree = json.loads(capsys.readouterr().out)
    assert tree["pipeline"]["asr"]["step_s"] == 0.75
    assert tree["server"]["load"]["admission"]["capacity"] == 3
    assert tree["server"]["limits"]["quotas"]["max_sdp_bytes"] == 4096
    assert main(["config"]) == 0
    assert tomllib.loads(capsys.readouterr().out) == tomllib.loads(render_config(Config()))


def test_config_command_rejects_a_bad_override(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "--set", "degrade.nope=1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "degrade has no option 'nope'" in err[0]


def test_removed_duplicate_flags_are_gone() -> None:
    """Batching is set with --set batching.* only (one way to set each setting)."""
    for flag in ("--no-batching", "--max-batch", "--batch-window-ms", "--asr-workers",
                 "--encode-bucket"):
        with pytest.raises(SystemExit):
            build_parser().parse_args(["serve", flag, "1"])


def test_serve_flags_without_values_keep_the_tree_defaults() -> None:
    from speechpipe.server.serve import serve_config

    config = serve_config(build_parser().parse_args(["serve"]))
    assert config == dataclasses.replace(Config(), server=config.server)
    assert config.server.load == Config().server.load
    assert config.server.limits.start_timeout_s == Config().server.limits.start_timeout_s
