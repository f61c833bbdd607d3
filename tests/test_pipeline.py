"""transformers.pipeline("translation" | "text2text-generation") on a saved model, through the pipeline code that
`add_pipeline_support` ships with it (transformers 5 removed both tasks)."""

import json
import shutil

import pytest
from tiny_model import GENERATION, SPLITS
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, pipeline

from vanilla_transformer.model_dir import add_pipeline_support

# Unseen numbers, then inputs unlike the training data, on which beam search and greedy decoding disagree.
SOURCES = [source for source, _ in SPLITS.valid[:6]] + ["twelve", "a hundred", "one million"]


@pytest.fixture(scope="module")
def pipeline_model_dir(tmp_path_factory, tiny_model_dir):
    """A copy of the tiny model directory with the pipeline's remote code added (`add_pipeline_support`)."""
    directory = tmp_path_factory.mktemp("pipeline") / "model"
    shutil.copytree(tiny_model_dir, directory)
    add_pipeline_support(directory)
    return directory


@pytest.fixture(scope="module")
def expected(pipeline_model_dir):
    """Each source translated alone by `generate`, with beam size 4 (the saved generation config's) and greedily."""
    model = AutoModelForSeq2SeqLM.from_pretrained(pipeline_model_dir)
    tokenizer = AutoTokenizer.from_pretrained(pipeline_model_dir)

    def translate(source, num_beams):
        output = model.generate(**tokenizer(source, return_tensors="pt"), num_beams=num_beams, max_new_tokens=24)
        return tokenizer.decode(output[0], skip_special_tokens=True)

    beam = [translate(source, 4) for source in SOURCES]
    greedy = [translate(source, 1) for source in SOURCES]
    assert beam != greedy, "the sources should tell beam search from greedy decoding"
    return {"beam": beam, "greedy": greedy}


def test_translation_pipeline_uses_the_saved_generation_config(pipeline_model_dir, expected):
    assert (
        json.loads((pipeline_model_dir / "generation_config.json").read_text())["num_beams"] == GENERATION["num_beams"]
    )
    translator = pipeline("translation", model=str(pipeline_model_dir), trust_remote_code=True)

    batched = translator(SOURCES, batch_size=4)  # padded batches of 4, 4 and 1
    assert batched == [{"translation_text": text} for text in expected["beam"]]
    assert translator(SOURCES[0]) == [{"translation_text": expected["beam"][0]}]
    assert translator(SOURCES, batch_size=3, num_beams=1) == [
        {"translation_text": text} for text in expected["greedy"]
    ]

    several = translator(SOURCES[:2], num_return_sequences=2)
    assert [len(results) for results in several] == [2, 2]
    assert [results[0]["translation_text"] for results in several] == expected["beam"][:2]


def test_text2text_generation_pipeline(pipeline_model_dir, expected):
    generator = pipeline("text2text-generation", model=str(pipeline_model_dir), trust_remote_code=True)

    assert generator(SOURCES, batch_size=2) == [{"generated_text": text} for text in expected["beam"]]
    (ids,) = generator(SOURCES[0], return_tensors=True)
    tokenizer = AutoTokenizer.from_pretrained(pipeline_model_dir)
    assert tokenizer.decode(ids["generated_token_ids"], skip_special_tokens=True) == expected["beam"][0]


def test_pipeline_needs_trust_remote_code_and_the_shipped_code(pipeline_model_dir, tmp_path):
    with pytest.raises(ValueError, match="trust_remote_code=True"):
        pipeline("translation", model=str(pipeline_model_dir))

    plain = tmp_path / "plain"
    shutil.copytree(pipeline_model_dir, plain, ignore=shutil.ignore_patterns("pipeline_vanilla_transformer.py"))
    config = json.loads((plain / "config.json").read_text())
    del config["custom_pipelines"]
    (plain / "config.json").write_text(json.dumps(config))
    with pytest.raises(KeyError, match="task translation has been removed"):  # what transformers 5 itself does
        pipeline("translation", model=str(plain), trust_remote_code=True)

    with pytest.raises(ValueError, match="model_dir=.* has no config.json"):
        add_pipeline_support(tmp_path / "empty")
    with pytest.raises(ValueError, match="inputs must be a string or a list of strings"):
        pipeline("translation", model=str(pipeline_model_dir), trust_remote_code=True)([3])


def test_translation_pipeline_runs_the_papers_search_from_the_exported_config(pipeline_model_dir, tmp_path):
    """A model exported with `paper_generation_config` (GNMT alpha 0.6, input length + 50, exact stop): the
    pipeline translates exactly as `translate` does (remote code: `test_remote_code_loads_without_the_package`)."""
    from vanilla_transformer.serving.search import paper_generation_config, translate

    paper_dir = tmp_path / "paper"
    shutil.copytree(pipeline_model_dir, paper_dir)
    model = AutoModelForSeq2SeqLM.from_pretrained(paper_dir)
    tokenizer = AutoTokenizer.from_pretrained(paper_dir)
    paper_generation_config(model.config, max_new_tokens=60).save_pretrained(paper_dir)
    saved = json.loads((paper_dir / "generation_config.json").read_text())
    assert saved["length_penalty_type"] == "gnmt" and saved["max_length_offset"] == 50
    translator = pipeline("translation", model=str(paper_dir), trust_remote_code=True)
    expected = translate(model, tokenizer, SOURCES)
    assert translator(SOURCES, batch_size=4) == [{"translation_text": text} for text in expected]
