"""The model folder's summary (vanilla_transformer/model_summary.py): the fields its producers may set, checked as
they build it, written in the order given, and read back as written."""

import json

import pytest

from vanilla_transformer.model_summary import (
    SUMMARY_FIELDS,
    SUMMARY_FILE,
    build_summary,
    read_training_summary,
    write_training_summary,
)


def test_a_summary_keeps_the_order_given_and_leaves_out_none(tmp_path):
    summary = build_summary(steps=80, dataset_name="numbers", bleu=None, recipe={"beam size": 4})
    assert list(summary) == ["steps", "dataset_name", "recipe"]
    path = write_training_summary(tmp_path, {**summary, "notes": None})
    assert path == tmp_path / SUMMARY_FILE
    assert path.read_text() == json.dumps(summary, indent=2, ensure_ascii=False) + "\n"
    assert read_training_summary(path) == summary


def test_a_field_the_schema_lacks_or_of_the_wrong_type_is_refused_before_anything_is_written(tmp_path):
    with pytest.raises(TypeError, match="no field 'step'"):
        build_summary(step=80)
    with pytest.raises(ValueError, match=r"steps must be int, got steps=8\.5"):
        write_training_summary(tmp_path, {"steps": 8.5})
    with pytest.raises(ValueError, match="train_pairs must be int, got train_pairs=True"):
        build_summary(train_pairs=True)  # a bool is no count
    assert not (tmp_path / SUMMARY_FILE).exists()


def test_the_reader_ignores_keys_it_does_not_know_and_refuses_what_is_not_an_object(tmp_path):
    path = tmp_path / SUMMARY_FILE
    path.write_text(json.dumps({"chrf": 40, "unknown": 1, "exact_match": None}))
    assert read_training_summary(path) == {"chrf": 40}
    path.write_text("[1]")
    with pytest.raises(ValueError, match="must hold a JSON object, found list"):
        read_training_summary(path)


def test_every_field_says_what_it_means():
    assert all(field.types and field.meaning for field in SUMMARY_FIELDS.values())
