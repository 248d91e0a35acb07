"""`KBROKER_*` environment variables as a source of broker properties: file < environment < --override."""

from __future__ import annotations

from pathlib import Path

import pytest

from kbroker import config


def test_env_var_names_map_to_dotted_lower_case_property_names() -> None:
    assert config.env_var_property("KBROKER_LOG_DIRS") == "log.dirs"
    assert config.env_var_property("KBROKER_BROKER_ID") == "broker.id"


def test_double_underscore_spells_an_underscore_and_triple_a_hyphen() -> None:
    assert config.env_var_property("KBROKER_NUM_IO__THREADS") == "num.io_threads"
    assert config.env_var_property("KBROKER_SOME___NAME") == "some-name"


def test_variables_without_the_prefix_name_no_property() -> None:
    assert config.env_var_property("LOG_DIRS") is None
    assert config.env_var_property("KBROKER_") is None


def test_environment_sets_a_property(tmp_path: Path) -> None:
    loaded = config.load(environ={"KBROKER_LOG_DIRS": str(tmp_path / "data"), "KBROKER_BROKER_ID": "7"})
    assert loaded.log_dirs == [tmp_path / "data"]
    assert loaded.broker_id == 7


def test_environment_overrides_the_properties_file(tmp_path: Path) -> None:
    properties = tmp_path / "server.properties"
    properties.write_text("broker.id=1\nlog.retention.hours=5\n", encoding="utf-8")
    loaded = config.load(properties, environ={"KBROKER_BROKER_ID": "2"})
    assert loaded.broker_id == 2
    assert loaded["log.retention.hours"] == 5


def test_override_flag_beats_the_environment() -> None:
    loaded = config.load(overrides=["broker.id=3"], environ={"KBROKER_BROKER_ID": "2"})
    assert loaded.broker_id == 3


def test_unrelated_kbroker_variables_are_not_taken_as_properties() -> None:
    assert config.environment_overrides({"KBROKER_LOG_FORMAT": "json", "KBROKER_UVLOOP": "1"}) == {}


def test_a_bad_value_from_the_environment_fails_like_one_from_the_file() -> None:
    with pytest.raises(config.ConfigError, match=r"broker\.id"):
        config.load(environ={"KBROKER_BROKER_ID": "-5"})


def test_load_reads_the_process_environment_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KBROKER_BROKER_ID", "9")
    assert config.load().broker_id == 9
