"""``speechpipe serve``'s flags in process: ``--set`` overrides and the load flags reach the
options, and the admission defaults are numbers."""

from __future__ import annotations


def test_serve_applies_set_overrides_and_load_flags():
    from speechpipe.cli import build_parser
    from speechpipe.server.serve import serve_options

    args = build_parser().parse_args([
        "serve", "--set", "asr.step_s=1.5", "--set", "batching.group_min_queue=2",
        "--set", "batching.enabled=false", "--capacity", "3", "--set", "admission.max_queue=5",
        "--set", "quotas.max_idle_s=off", "--set", "degrade.down_after_s=20",
        "--set", "limits.start_timeout_s=7", "--set", "text_mt.beam_size=2",
    ])
    options, limits, load = serve_options(args)
    assert options.asr.step_s == 1.5
    assert options.batching.group_min_queue == 2
    assert options.batching.enabled is False
    assert options.text_mt.beam_size == 2
    assert load.admission.capacity == 3 and load.admission.max_queue == 5
    assert load.degrade.down_after_s == 20.0
    assert limits.quotas.max_idle_s is None and limits.start_timeout_s == 7.0


def test_serve_default_admission_options_are_numbers():
    """Regression: the --max-queue default was the slots descriptor, not 16, so the first
    session that had to wait crashed its handler instead of being queued."""
    from speechpipe.cli import build_parser
    from speechpipe.server.admission import AdmissionOptions
    from speechpipe.server.serve import serve_options

    _, _, load = serve_options(build_parser().parse_args(["serve"]))
    assert load.admission.max_queue == AdmissionOptions().max_queue == 16
    assert load.admission.max_wait_s == AdmissionOptions().max_wait_s
