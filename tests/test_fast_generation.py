"""generate() on the fast incremental decoder (generation_vanilla_transformer.py) against independent searches:
transformers' own greedy and beam search loops, and the paper's beam search written plainly (`beam_oracle`)."""

import warnings

import beam_oracle
import pytest
import torch
from transformers import CompileConfig, GenerationConfig
from transformers.cache_utils import DynamicCache, EncoderDecoderCache, StaticCache

from vanilla_transformer.cache_vanilla_transformer import cache_field
from vanilla_transformer.generation_vanilla_transformer import _top
from vanilla_transformer.serving.search import paper_generation_config, translate
from vanilla_transformer.tokenization import EOS_ID
from vanilla_transformer.training.step import compile_count

SOURCES = [[5, 6, 7, 8, 9, 10, EOS_ID], [11, 4, 5, EOS_ID], [7, EOS_ID], [4, 4, 9, 10, 6, EOS_ID]]


def transformers_loop(model, **kwargs) -> torch.Tensor:
    """transformers' own search: asking for a dict output makes the fast decoder hand the call over."""
    return model.generate(**kwargs, return_dict_in_generate=True).sequences


def hypotheses(sequences: torch.Tensor, fill: int) -> list[list[int]]:
    """Each row's generated tokens: up to and including the first </s>, else up to the trailing `fill`."""
    rows = []
    for row in sequences[:, 1:].tolist():
        if EOS_ID in row:
            rows.append(row[: row.index(EOS_ID) + 1])
        else:
            while row and row[-1] == fill:
                row.pop()
            rows.append(row)
    return rows


SETTINGS = [
    dict(num_beams=1),
    dict(num_beams=4, length_penalty=0.0, early_stopping="never"),
    dict(num_beams=4, length_penalty=1.0),  # transformers' defaults: |Y| ** 1, the early-stopping heuristic
    dict(num_beams=4, length_penalty=1.0, early_stopping=True),
    dict(num_beams=4, length_penalty=2.0, early_stopping="never"),
    dict(num_beams=3, length_penalty=0.6, early_stopping="never", num_return_sequences=2),
]


@pytest.mark.parametrize("settings", SETTINGS, ids=lambda s: ",".join(f"{k}={v}" for k, v in s.items()))
def test_generate_equals_transformers_own_search(make_peaked_model, padded_batch, settings, decoder_steps):
    """Greedy and beam search at alpha 0 and with transformers' |Y| ** alpha, with each early-stopping rule: the
    same tokens, padding included, as transformers' loop on the same model and padded batch."""
    ended = {"with </s>": 0, "at the maximum length": 0}
    for seed in range(10):
        model = make_peaked_model(vocab_size=12, seed=seed, head_std=0.3, eos_std=1.0)
        input_ids, attention_mask = padded_batch(SOURCES)
        kwargs = dict(input_ids=input_ids, attention_mask=attention_mask, max_new_tokens=9, **settings)
        decoder_steps.clear()
        fast = model.generate(**kwargs)
        assert decoder_steps, "the fast decoder did not run"
        decoder_steps.clear()
        expected = transformers_loop(model, **kwargs)
        assert not decoder_steps
        assert fast.tolist() == expected.tolist()
        for row in expected[:, 1:].tolist():
            ended["with </s>" if EOS_ID in row else "at the maximum length"] += 1
    assert all(ended.values()), ended


@pytest.mark.parametrize("num_beams", [1, 4])
def test_a_model_without_attention_biases_decodes_on_the_fast_decoder(
    make_peaked_model, padded_batch, num_beams, decoder_steps
):
    """``attention_bias=False`` (the paper's equations): the fused projections have no bias to concatenate, and the
    tokens are transformers' own."""
    for seed in range(3):
        model = make_peaked_model(vocab_size=12, seed=seed, head_std=0.3, eos_std=1.0, attention_bias=False)
        input_ids, attention_mask = padded_batch(SOURCES)
        kwargs = dict(input_ids=input_ids, attention_mask=attention_mask, max_new_tokens=9, num_beams=num_beams)
        decoder_steps.clear()
        fast = model.generate(**kwargs)
        assert decoder_steps, "the fast decoder did not run"
        assert fast.tolist() == transformers_loop(model, **kwargs).tolist()


@pytest.mark.parametrize("alpha", [0.6, 2.0])
def test_generate_with_the_paper_config_is_the_papers_beam_search(
    make_peaked_model, padded_batch, alpha, decoder_steps
):
    """GNMT's penalty and each sentence's own maximum (input length + offset): the oracle's result, which
    transformers' search (|Y| ** alpha, one maximum per batch) does not give."""
    offset, differs_from_transformers = 4, 0
    for seed in range(4):
        model = make_peaked_model(vocab_size=12, seed=seed, head_std=0.3, eos_std=1.0)
        input_ids, attention_mask = padded_batch(SOURCES)
        config = paper_generation_config(model.config, length_penalty=alpha, max_length_offset=offset)
        output = model.generate(input_ids=input_ids, attention_mask=attention_mask, generation_config=config)
        assert decoder_steps
        for row, source in zip(output.tolist(), SOURCES, strict=True):
            expected = beam_oracle.beam_search(model, source, 4, alpha, len(source) + offset)
            assert row[1:] == expected + [0] * (output.shape[1] - 1 - len(expected))  # padded with pad_token_id
        for row, source in zip(hypotheses(output, 0), SOURCES, strict=True):
            assert len(row) <= len(source) + offset
        hugging_face = GenerationConfig(
            num_beams=4,
            length_penalty=alpha,
            early_stopping="never",
            max_new_tokens=max(map(len, SOURCES)) + offset,
            pad_token_id=0,
            eos_token_id=EOS_ID,
            decoder_start_token_id=model.config.decoder_start_token_id,
        )
        other = model.generate(input_ids=input_ids, attention_mask=attention_mask, generation_config=hugging_face)
        differs_from_transformers += hypotheses(other, EOS_ID) != hypotheses(output, 0)
    assert differs_from_transformers > 0  # the tests can tell the paper's search from transformers'


def test_each_sentence_stops_at_its_own_input_length_plus_offset(make_peaked_model, padded_batch):
    model = make_peaked_model(vocab_size=12, seed=0)
    with torch.no_grad():  # </s> never wins
        model.model.decoder.layers[-1].final_layer_norm.bias.fill_(1.0)
        model.lm_head.weight[[EOS_ID, 0]] = -100.0
    input_ids, attention_mask = padded_batch(SOURCES)
    for num_beams in (1, 3):
        config = paper_generation_config(model.config, num_beams=num_beams, max_length_offset=3)
        output = model.generate(input_ids=input_ids, attention_mask=attention_mask, generation_config=config)
        assert [len(row) for row in hypotheses(output, 0)] == [len(source) + 3 for source in SOURCES]
        assert output.shape[1] == 1 + max(map(len, SOURCES)) + 3


def test_translate_runs_the_fast_decoder_and_equals_the_oracle(make_peaked_model, decoder_steps):
    from vanilla_transformer.tokenization import train_tokenizer

    words = "one two three four five six seven eight nine ten eins zwei drei vier fünf sechs sieben acht neun zehn"
    tokenizer = train_tokenizer(words.split() * 3, vocab_size=300)
    model = make_peaked_model(vocab_size=len(tokenizer), seed=2, head_std=0.3, eos_std=1.0)
    sentences = ["one two", "three four five six seven eight", "nine", "ten ten ten ten"]
    texts = translate(model, tokenizer, sentences, max_length_offset=5, batch_size=3)
    assert decoder_steps
    sources = tokenizer(sentences)["input_ids"]
    expected = [beam_oracle.beam_search(model, source, 4, 0.6, len(source) + 5) for source in sources]
    assert texts == tokenizer.batch_decode(expected, skip_special_tokens=True)


def test_calls_it_does_not_serve_run_transformers_loop(make_peaked_model, padded_batch, decoder_steps):
    model = make_peaked_model(vocab_size=12, seed=1, head_std=0.3, eos_std=1.0)
    input_ids, attention_mask = padded_batch(SOURCES)
    kwargs = dict(input_ids=input_ids, attention_mask=attention_mask, max_new_tokens=6)
    for extra in (
        dict(do_sample=True, top_k=3),
        dict(no_repeat_ngram_size=2),  # a logits processor
        dict(num_beams=2, min_new_tokens=3),
        dict(output_scores=True, return_dict_in_generate=True),
        dict(decoder_input_ids=torch.tensor([[2, 5]] * 4)),
    ):
        decoder_steps.clear()
        torch.manual_seed(0)
        model.generate(**kwargs, **extra)
        assert not decoder_steps, extra
    # With the paper's fields, a fall-back warns that transformers' loop ignores them.
    config = paper_generation_config(model.config, max_length_offset=3)
    with pytest.warns(UserWarning, match="logits processors .* ignores length_penalty_type='gnmt'"):
        model.generate(input_ids=input_ids, generation_config=config, no_repeat_ngram_size=2)
    # Dropout in training mode would make the searches differ: transformers' loop runs, with dropout.
    model.config.dropout = 0.5
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.5
    decoder_steps.clear()
    model.train().generate(**kwargs)
    assert not decoder_steps
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model.eval().generate(**kwargs)  # in eval mode the fast decoder serves the call, silently
    assert decoder_steps
    # Attention dropout alone (a rate the attention function applies, no nn.Dropout module): the same.
    only_attention = make_peaked_model(
        vocab_size=12, seed=1, head_std=0.3, eos_std=1.0, dropout=0.0, attention_dropout=0.5
    )
    decoder_steps.clear()
    only_attention.train().generate(**kwargs)
    assert not decoder_steps


def _forward_caches(model):
    """The types of the self-attention caches the model's forward passes receive, recorded by a hook on the model
    itself (not on the decoder: a hook there would send every call to transformers' loop)."""
    seen = []

    def record(module, args, kwargs):
        cache = kwargs.get(cache_field())
        seen.append(type(getattr(cache, "self_attention_cache", cache)).__name__)

    return seen, model.register_forward_pre_hook(record, with_kwargs=True)


def test_static_cache_and_compile_config_run_transformers_compiled_path(
    make_peaked_model, padded_batch, decoder_steps
):
    """A user's ``cache_implementation="static"``, ``compile_config`` or own StaticCache is never served by the fast
    decoder: transformers' loop runs on the static cache, compiled when asked, and gives the fast decoder's tokens.
    As transformers' ``test_static_cache_no_recompile_with_smaller_length``: a second call with fewer new tokens does
    not compile again."""
    model = make_peaked_model(vocab_size=12, seed=2, head_std=0.3, eos_std=1.0)
    input_ids, attention_mask = padded_batch(SOURCES)
    kwargs = dict(input_ids=input_ids, attention_mask=attention_mask, max_new_tokens=6)
    fast = {beams: model.generate(**kwargs, num_beams=beams) for beams in (1, 2)}
    assert decoder_steps
    caches, hook = _forward_caches(model)
    for beams in (1, 2):
        decoder_steps.clear()
        static = model.generate(**kwargs, num_beams=beams, cache_implementation="static")
        assert not decoder_steps and set(caches) == {"StaticCache"}
        assert static.tolist() == fast[beams].tolist()
        caches.clear()
    own = EncoderDecoderCache(StaticCache(config=model.config, max_cache_len=8), DynamicCache(config=model.config))
    assert model.generate(**kwargs, **{cache_field(): own}).tolist() == fast[1].tolist()
    assert not decoder_steps and set(caches) == {"StaticCache"}
    hook.remove()  # (dynamo would trace it)
    # Compiled decoding (transformers compiles only on accelerators unless told to compile on every device).
    compile_config = CompileConfig(backend="eager", fullgraph=True)
    compile_config._compile_all_devices = True
    torch._dynamo.reset()
    before = compile_count()
    compiled = model.generate(**kwargs, cache_implementation="static", compile_config=compile_config)
    assert not decoder_steps and compile_count() > before
    assert compiled.tolist() == fast[1].tolist()
    compiled_graphs = compile_count()
    with torch._dynamo.config.patch(error_on_recompile=True):
        shorter = model.generate(**{**kwargs, "max_new_tokens": 3}, cache_implementation="static",
                                 compile_config=compile_config)  # fmt: skip
    assert compile_count() == compiled_graphs and not decoder_steps
    assert shorter.tolist() == [row[:4] for row in fast[1].tolist()]


def test_outputs_are_ordinary_tensors_usable_as_training_labels(make_peaked_model, padded_batch):
    """Not inference-mode tensors: a generated batch can be fed back as labels and trained on (self-training)."""
    model = make_peaked_model(vocab_size=12, seed=4, head_std=0.3, eos_std=1.0)
    input_ids, attention_mask = padded_batch(SOURCES)
    for num_beams in (1, 2):
        output = model.generate(
            input_ids=input_ids, attention_mask=attention_mask, max_new_tokens=5, num_beams=num_beams
        )
        assert not output.is_inference()
        model(input_ids=input_ids, attention_mask=attention_mask, labels=output[:, 1:]).loss.backward()


def test_prepared_weights_follow_changes_to_the_model(make_peaked_model, padded_batch, decoder_steps):
    model = make_peaked_model(vocab_size=12, seed=3, head_std=0.3, eos_std=1.0)
    input_ids, attention_mask = padded_batch(SOURCES)
    kwargs = dict(input_ids=input_ids, attention_mask=attention_mask, max_new_tokens=6, num_beams=2)
    model.generate(**kwargs)
    with torch.no_grad():
        model.model.decoder.layers[0].self_attn.k_proj.weight.mul_(3.0)  # in place: a training step does this
    assert model.generate(**kwargs).tolist() == transformers_loop(model, **kwargs).tolist()


@pytest.mark.parametrize("size", [9, 64 * 16, 8000, 8001, 37000])
def test_top_equals_topk(size):
    generator = torch.Generator().manual_seed(size)
    scores = torch.randn(6, size, generator=generator)
    scores[0, -5:] += 10  # the best values in the last, partial chunk
    values, indices = _top(scores, 8)
    expected = scores.topk(8)
    assert torch.equal(values, expected.values) and torch.equal(indices, expected.indices)
