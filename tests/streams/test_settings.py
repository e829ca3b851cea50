"""Stream settings come from the environment, with clear errors and masked secrets."""

from __future__ import annotations

from pathlib import Path

import pytest

from dripstream.processors.label.templates import TemplateSettings
from dripstream.streams.settings import SETTINGS, SettingsError, StreamSettings, markdown


def test_defaults_give_a_local_plaintext_pipeline() -> None:
    settings = StreamSettings.from_env({})
    assert settings.brokers == "127.0.0.1:9092"
    assert settings.stages == ("simplify", "label", "reconstruct", "fallback")
    assert settings.group_id() == "dripstream-simplify+label+reconstruct+fallback"


def test_each_stage_set_has_its_own_consumer_group() -> None:
    label = StreamSettings.from_env({"DRIPSTREAM_STAGES": "label"})
    assert label.group_id() == "dripstream-label"


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"DRIPSTREAM_STAGES": "simplify,guess"}, "DRIPSTREAM_STAGES"),
        ({"DRIPSTREAM_MAX_BATCH": "many"}, "DRIPSTREAM_MAX_BATCH"),
        ({"DRIPSTREAM_SECURITY_PROTOCOL": "SASL_SSL"}, "DRIPSTREAM_SASL_USERNAME"),
        ({"DRIPSTREAM_SECURITY_PROTOCOL": "TLS"}, "DRIPSTREAM_SECURITY_PROTOCOL"),
        ({"DRIPSTREAM_SASL_PASSWORD_FILE": "/nonexistent/secret"}, "PASSWORD_FILE"),
        ({"DRIPSTREAM_CPU_MAX_BLOCKS": "0"}, "DRIPSTREAM_CPU_MAX_BLOCKS"),
        ({"DRIPSTREAM_TEMPLATE_EXPECTED_AGREEMENT": "97"}, "DRIPSTREAM_TEMPLATE_EXPECTED_AGREE"),
        ({"DRIPSTREAM_TEMPLATE_AGREEMENT": "0"}, "DRIPSTREAM_TEMPLATE_AGREEMENT"),
        ({"DRIPSTREAM_TEMPLATE_SHADOW_RATE": "-0.1"}, "DRIPSTREAM_TEMPLATE_SHADOW_RATE"),
        ({"DRIPSTREAM_TEMPLATE_MIN_TEACHER_CONFIDENCE": "50"}, "MIN_TEACHER_CONFIDENCE"),
    ],
)
def test_bad_settings_are_refused_with_the_variable_named(env: dict, message: str) -> None:
    from dripstream.streams.stages import chosen

    with pytest.raises(SettingsError, match=message):
        chosen(StreamSettings.from_env(env).stages)  # stage names: the stage registry's check


def test_password_comes_from_a_file_and_is_never_shown(tmp_path: Path) -> None:
    secret = tmp_path / "password"
    secret.write_text("s3cret-value\n")
    settings = StreamSettings.from_env(
        {
            "DRIPSTREAM_SECURITY_PROTOCOL": "SASL_SSL",
            "DRIPSTREAM_SASL_USERNAME": "crawler",
            "DRIPSTREAM_SASL_PASSWORD_FILE": str(secret),
        }
    )
    assert settings.sasl_password == "s3cret-value"
    shown = dict(settings.describe())
    assert "s3cret-value" not in repr(shown)
    assert shown["DRIPSTREAM_SASL_PASSWORD"] == "***"
    assert shown["DRIPSTREAM_SASL_PASSWORD_FILE"] == str(secret)  # the path, never its contents


def test_every_setting_is_in_the_generated_configuration_page() -> None:
    page = (Path(__file__).resolve().parents[2] / "docs" / "configuration.md").read_text()
    missing = [setting.env for setting in SETTINGS if f"`{setting.env}`" not in page]
    assert not missing
    assert page == markdown(), "regenerate: python -m dripstream.streams.settings --markdown"


def test_a_run_gets_topics_and_groups_of_its_own() -> None:
    base = StreamSettings.from_env({})
    run = base.for_run("demo-7", web_port=0)
    assert run.topic_prefix == "dripstream.demo-7." and run.group_prefix == "dripstream-demo-7-"
    assert run.web_port == 0 and run.brokers == base.brokers


def test_the_template_cache_takes_its_shares_from_the_environment() -> None:
    settings = StreamSettings.from_env(
        {
            "DRIPSTREAM_TEMPLATE_AGREEMENT": "0.99",
            "DRIPSTREAM_TEMPLATE_EXPECTED_AGREEMENT": "0.95",
            "DRIPSTREAM_TEMPLATE_MIN_TEACHER_CONFIDENCE": "0.7",
        }
    ).template_settings()
    assert (settings.agreement, settings.expected_agreement) == (0.99, 0.95)
    assert settings.min_teacher_confidence == 0.7
    # The stream's defaults are the cache's own (declared once, on TemplateSettings).
    assert StreamSettings.from_env({}).template_settings() == TemplateSettings()
