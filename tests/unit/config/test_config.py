"""One configuration tree: every group reachable with ``--set``, listed by ``speechpipe config``."""

from __future__ import annotations

import dataclasses
import json
import tomllib

import pytest

from speechpipe.cli import build_parser, main
from speechpipe.config import (
    GROUPS,
    Config,
    PipelineOptions,
    apply_overrides,
    config_dict,
    groups_of,
    settable_fields,
    with_overrides,
)
from speechpipe.config_file import render_config
from speechpipe.errors import InputError


def _help_of(command: str) -> str:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command").choices[command]
    return " ".join(sub.format_help().split())


def test_groups_are_derived_from_the_tree() -> None:
    """Every option dataclass of the tree with settable leaves is a group (none listed by
    hand); the help texts list them from ``GROUPS``."""
    def sections(node: object, path: tuple[str, ...]) -> dict[tuple[str, ...], object]:
        out = {}
        for f in dataclasses.fields(node):  # type: ignore[arg-type]
            value = getattr(node, f.name)
            if dataclasses.is_dataclass(value):
                out[(*path, f.name)] = value
                out.update(sections(value, (*path, f.name)))
        return out

    with_leaves = {path for path, value in sections(Config(), ()).items()
                   if settable_fields(value)}
    assert set(GROUPS.values()) == with_leaves
    assert {"cluster", "quotas", "admission", "vad"} <= set(GROUPS)
    listed = [g.strip() for g in f"{groups_of('pipeline')}, {groups_of('server')}".split(",")]
    assert sorted(listed) == sorted(GROUPS)


@pytest.mark.parametrize("command", ["translate", "eval", "serve", "config"])
def test_set_help_lists_the_groups_the_command_accepts(command: str) -> None:
    text = _help_of(command)
    groups = [g for g, path in GROUPS.items()
              if command in ("serve", "config") or path[0] == "pipeline"]
    for group in groups:
        assert group in text, (command, group)


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


def test_serve_flags_without_values_keep_the_tree_defaults(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from speechpipe.server.serve import serve_config

    monkeypatch.delenv("SPEECHPIPE_AUTH_SECRET", raising=False)
    assert serve_config(build_parser().parse_args(["serve"])) == Config()


def _leaf_value(config: Config, leaf: str) -> object:
    group, _, name = leaf.partition(".")
    section: object = config
    for part in GROUPS[group]:
        section = getattr(section, part)
    return getattr(section, name)


def test_every_shorthand_flag_is_an_alias_of_one_leaf(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each alias flag writes its leaf and nothing else; its help names the leaf."""
    from speechpipe.server.serve import serve_aliases, serve_config

    monkeypatch.delenv("SPEECHPIPE_AUTH_SECRET", raising=False)
    help_text = _help_of("serve")
    aliases = serve_aliases()
    assert len({a.leaf for a in aliases}) == len(aliases)  # one flag per leaf
    serve = next(a for a in build_parser()._actions if a.dest == "command").choices["serve"]
    dests = {a.dest for a in aliases}
    flagged = [a for a in serve._actions if a.dest in dests]
    assert len(flagged) == len(aliases)
    # the default is the leaf's, written once: a flag not given writes nothing
    from speechpipe.config import NOT_GIVEN
    assert all(a.default is (None if a.dest in {x.dest for x in aliases if x.repeat}
                             else NOT_GIVEN) for a in flagged)
    base = Config()
    for alias in aliases:
        assert f"--set {alias.leaf}" in help_text, alias.flag
        if alias.repeat:
            argv, expected = [alias.flag, "*", alias.flag, "*"], ("*", "*")
        elif alias.is_switch:
            argv, expected = [alias.flag], alias.switch
        else:
            raw = ("X-Real-IP" if alias.flag == "--client-ip-header"  # a header name
                   else "ws://h:1/ws") if alias.type is str else (
                "0.25" if alias.flag == "--min-audio-ratio" else "3")
            argv, expected = [alias.flag, raw], alias.type(raw)
        config = serve_config(build_parser().parse_args(["serve", *argv]))
        assert _leaf_value(config, alias.leaf) == expected != _leaf_value(base, alias.leaf), (
            alias.flag)
        for other in aliases:
            if other.leaf != alias.leaf:
                assert _leaf_value(config, other.leaf) == _leaf_value(base, other.leaf), (
                    alias.flag, other.leaf)


def test_cluster_options_come_from_the_tree() -> None:
    from speechpipe.cluster.ledger_core import LedgerOptions
    from speechpipe.cluster.node import ClusterOptions
    from speechpipe.cluster.options import ClusterSettings
    from speechpipe.server.serve import cluster_options, serve_config

    settings = ClusterSettings()
    assert LedgerOptions().lease_s == settings.lease_s
    assert LedgerOptions().resume_window_s == settings.resume_window_s
    assert ClusterOptions("h:1", "ws://x", 1).drain_deadline_s == settings.drain_deadline_s
    pytest.importorskip("ray")
    config = serve_config(build_parser().parse_args([
        "serve", "--cluster", "h:1", "--public-url", "ws://n:1/ws", "--cluster-lease", "9",
        "--set", "cluster.resume_window_s=7", "--drain-deadline", "30",
        "--set", "quotas.max_sessions_per_token=2"]))
    node = cluster_options(config)
    assert node is not None and node.address == "h:1" and node.drain_deadline_s == 30.0
    assert node.ledger.lease_s == 9.0 and node.ledger.resume_window_s == 7.0
    assert node.ledger.per_token == 2


def test_an_alias_whose_zero_means_off_turns_the_limit_off():
    """``--max-sessions-per-ip 0`` and ``--ping-interval 0`` ("0 = no limit / off") reach
    their leaves as off: the flag's type turns 0 into None, which once read as "not given"
    and silently kept the defaults (32 connections per address: the room bench's 200
    listeners were refused 429)."""
    import argparse

    from speechpipe.config import Config, add_aliases, apply_aliases
    from speechpipe.server.security import SECURITY_ALIASES

    parser = argparse.ArgumentParser()
    add_aliases(parser, SECURITY_ALIASES)
    given = apply_aliases(Config(), parser.parse_args(
        ["--max-sessions-per-ip", "0", "--ping-interval", "0", "--max-sessions-per-token", "2"]),
        SECURITY_ALIASES)
    assert _leaf_value(given, "quotas.max_sessions_per_ip") is None
    assert _leaf_value(given, "limits.ping_interval_s") is None
    assert _leaf_value(given, "quotas.max_sessions_per_token") == 2
    untouched = apply_aliases(Config(), parser.parse_args([]), SECURITY_ALIASES)
    assert untouched == Config()
