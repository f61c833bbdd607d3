"""generate() of a model whose decoder computes something other than its plain weights (a PEFT adapter, a forward
hook) equals decoding it by forward passes: the fast decoder folds a plain LoRA adapter into the weights it copies,
and leaves anything else to transformers' loop."""

import copy
import random

import pytest
import torch
from copy_task import generate, greedy_by_forward_passes
from without_package import run_without_package

peft = pytest.importorskip("peft")


def with_lora(model, seed: int = 0):
    """A LoRA adapter (r 8) on q_proj and v_proj, its B matrices random (not zero), so that it changes outputs."""
    torch.manual_seed(seed)
    config = peft.LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    return peft.get_peft_model(copy.deepcopy(model), config).eval()


def beam_by_transformers_loop(model, batch):
    """transformers' own beam search, each step a full forward pass (no cache)."""
    return generate(model, batch, num_beams=4, use_cache=False, return_dict_in_generate=True).sequences


def test_generate_of_a_lora_model_is_the_adapted_model(copy_model, copy_batch, decoder_steps):
    """A plain LoRA adapter is folded into the fast decoder's prepared weights (W + scaling * B A): the fast decoder
    serves the call, with the adapted model's tokens."""
    model, _ = copy_model
    adapted = with_lora(model)
    expected = greedy_by_forward_passes(adapted, copy_batch)
    assert not torch.equal(expected, greedy_by_forward_passes(model, copy_batch))  # the adapter matters
    decoder_steps.clear()
    assert torch.equal(generate(adapted, copy_batch), expected)
    assert decoder_steps, "the fast decoder did not serve a plain LoRA model"
    assert torch.equal(generate(adapted.get_base_model(), copy_batch, use_cache=False), expected)
    assert torch.equal(generate(adapted, copy_batch, num_beams=4), beam_by_transformers_loop(adapted, copy_batch))
    with adapted.disable_adapter():  # the base model's tokens, from weights prepared anew
        assert torch.equal(generate(adapted, copy_batch), greedy_by_forward_passes(model, copy_batch))
    merged = adapted.merge_and_unload()
    assert torch.equal(generate(merged, copy_batch), expected)


def test_the_fast_decoder_follows_the_active_adapter_and_its_updates(copy_model, copy_batch, decoder_steps):
    model, _ = copy_model
    adapted = with_lora(model, seed=1)
    torch.manual_seed(2)
    second = peft.LoraConfig(r=4, lora_alpha=32, target_modules=["k_proj", "fc1"], init_lora_weights=False)
    adapted.add_adapter("second", second)
    for name in ("second", "default", "second"):
        adapted.set_adapter(name)
        adapted.eval()
        assert torch.equal(generate(adapted, copy_batch), greedy_by_forward_passes(adapted, copy_batch)), name
    with torch.no_grad():  # in place, as an optimizer step updates an adapter
        for module in adapted.modules():
            if isinstance(module, peft.tuners.lora.LoraLayer) and "second" in module.lora_B:
                module.lora_B["second"].weight.mul_(-2.0)
    assert torch.equal(generate(adapted, copy_batch), greedy_by_forward_passes(adapted, copy_batch))
    assert decoder_steps


def test_a_lora_variant_goes_to_transformers_loop(copy_model, copy_batch, decoder_steps):
    """DoRA rescales W + B A by a learned magnitude per output: not the plain form the decoder folds in."""
    model, _ = copy_model
    torch.manual_seed(3)
    config = peft.LoraConfig(r=8, target_modules=["q_proj", "v_proj"], use_dora=True, init_lora_weights=False)
    adapted = peft.get_peft_model(copy.deepcopy(model), config).eval()
    decoder_steps.clear()
    assert torch.equal(generate(adapted, copy_batch), greedy_by_forward_passes(adapted, copy_batch))
    assert not decoder_steps


def test_generate_with_a_forward_hook_is_the_hooked_model(copy_model, copy_batch, decoder_steps):
    model, _ = copy_model
    fc2 = model.get_decoder().layers[0].fc2
    handle = fc2.register_forward_hook(lambda module, args, output: 1.5 * output)
    try:
        expected = greedy_by_forward_passes(model, copy_batch)
        decoder_steps.clear()
        assert torch.equal(generate(model, copy_batch), expected)
        assert torch.equal(generate(model, copy_batch, num_beams=4), beam_by_transformers_loop(model, copy_batch))
        assert not decoder_steps
    finally:
        handle.remove()
    assert not torch.equal(greedy_by_forward_passes(model, copy_batch), expected)  # the hook mattered
    decoder_steps.clear()
    assert torch.equal(generate(model, copy_batch), greedy_by_forward_passes(model, copy_batch))
    assert decoder_steps, "without the hook, the plain model takes the fast decoder again"


# --------------------------------------------------------------------------- LoRA fine-tuning and adapter folders

LORA_TARGETS = "q_proj,v_proj,fc1,fc2"


def held_out_pairs():
    """Numbers of 1..999 that neither the tiny model nor the LoRA fine-tune saw."""
    from num2words import num2words
    from tiny_model import SPLITS

    seen = set(SPLITS.train) | set(SPLITS.valid)
    numbers = random.Random(5).sample(range(1, 1000), 300)  # uniformly, as the tiny model's numbers
    return [pair for n in numbers if (pair := (num2words(n, lang="en"), num2words(n, lang="de"))) not in seen]


def greedy(model, tokenizer, sources):
    """Greedy translations by transformers' generate()."""
    batch = tokenizer(list(sources), padding=True, return_tensors="pt")
    with torch.no_grad():
        output = model.generate(**batch, num_beams=1, do_sample=False, max_new_tokens=40)
    return tokenizer.batch_decode(output, skip_special_tokens=True)


def write_lines(path, lines):
    path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def lora_run(tiny_model_dir, tmp_path_factory):
    """``vanilla-transformer finetune --lora --merge`` of the tiny model, on the pairs it was trained on (120 steps)."""
    from tiny_model import SPLITS, load_script

    root = tmp_path_factory.mktemp("lora")
    for split, pairs in (("train", SPLITS.train), ("dev", SPLITS.valid)):
        write_lines(root / f"{split}.en", [source for source, _ in pairs])
        write_lines(root / f"{split}.de", [target for _, target in pairs])
    output = root / "adapter"
    exit_code = load_script("finetune").main([
        str(tiny_model_dir), "--train", str(root / "train.en"), str(root / "train.de"),
        "--eval", str(root / "dev.en"), str(root / "dev.de"), "--src-lang", "en", "--tgt-lang", "de",
        "--output-dir", str(output), "--lora", "--lora-target-modules", LORA_TARGETS, "--lora-dropout", "0",
        "--merge", "--max-steps", "120", "--eval-steps", "60", "--batch-size", "16", "--learning-rate", "1e-2",
        "--warmup-steps", "0", "--num-beams", "1", "--metric-for-best-model", "exact_match", "--seed", "0",
        "--disable-tqdm", "true",
    ])  # fmt: skip
    assert exit_code == 0
    return output


def test_lora_finetune_raises_exact_match_and_writes_an_adapter_folder(lora_run, tiny_model_dir):
    from huggingface_hub import ModelCard
    from safetensors.torch import load_file

    from vanilla_transformer.model_dir import load_model_dir

    names = {path.name for path in lora_run.iterdir()}
    assert {"adapter_config.json", "adapter_model.safetensors", "tokenizer.json", "README.md"} <= names
    assert not {"model.safetensors", "config.json"} & names  # the adapter only, not a copy of the base
    # A and B for each adapted layer: per encoder layer q, v, fc1, fc2; per decoder layer q, v of self- and
    # cross-attention, fc1, fc2; 2 + 2 layers.
    adapter = load_file(lora_run / "adapter_model.safetensors")
    assert len(adapter) == 2 * (2 * 4 + 2 * 6) and all(".lora_A." in key or ".lora_B." in key for key in adapter)
    assert ModelCard.load(lora_run / "README.md").data.base_model == str(tiny_model_dir)

    pairs = held_out_pairs()
    sources, references = zip(*pairs, strict=True)
    scores = {}
    for name, directory in (("base", tiny_model_dir), ("lora", lora_run)):
        model, tokenizer = load_model_dir(directory)
        hypotheses = greedy(model, tokenizer, sources)
        scores[name] = sum(h == r for h, r in zip(hypotheses, references, strict=True)) / len(pairs)
    assert len(pairs) >= 200 and scores["lora"] >= scores["base"] + 0.15, scores  # measured: 23% -> 55%


def test_adapter_round_trips_through_save_and_load(tiny_model_dir, tmp_path):
    from vanilla_transformer.model_dir import load_model_dir, save_adapter_dir
    from vanilla_transformer.training.lora import add_lora

    base, tokenizer = load_model_dir(tiny_model_dir)
    sources = [source for source, _ in held_out_pairs()[:24]]
    base_output = greedy(base, tokenizer, sources)
    model = add_lora(base, r=4, alpha=8, target_modules=["q_proj", "v_proj", "fc2"])
    torch.manual_seed(1)
    for name, parameter in model.named_parameters():
        if "lora_B" in name:  # B starts at zero, which would make the adapter a no-op
            torch.nn.init.normal_(parameter, std=0.3)
    model.eval()
    expected = greedy(model, tokenizer, sources)
    assert expected != base_output  # the adapter changes translations
    save_adapter_dir(model, tokenizer, tmp_path / "adapter")

    loaded, loaded_tokenizer = load_model_dir(tmp_path / "adapter")
    assert type(loaded).__name__ == "PeftModelForSeq2SeqLM" and not loaded.training
    assert greedy(loaded, loaded_tokenizer, sources) == expected
    saved = {name: p for name, p in model.named_parameters() if "lora_" in name}
    restored = dict(loaded.named_parameters())
    assert saved and all(torch.equal(restored[name], tensor) for name, tensor in saved.items())


def test_merged_and_unmerged_decode_the_same(lora_run, tiny_model_dir):
    from safetensors.torch import load_file

    from vanilla_transformer.model_dir import load_model_dir
    from vanilla_transformer.serving.search import translate

    merged_dir = lora_run / "merged"
    assert load_file(merged_dir / "model.safetensors").keys() == load_file(tiny_model_dir / "model.safetensors").keys()
    (adapter, tokenizer), (merged, _), (base, _) = map(load_model_dir, (lora_run, merged_dir, tiny_model_dir))
    assert type(merged).__name__ == "VanillaTransformerForConditionalGeneration"
    sources = [source for source, _ in held_out_pairs()[:48]]
    batch = tokenizer(sources[:16], padding=True, return_tensors="pt")
    decoder_input_ids = torch.full((16, 1), tokenizer.bos_token_id)
    with torch.no_grad():
        logits = [m(**batch, decoder_input_ids=decoder_input_ids).logits for m in (adapter, merged, base)]
    torch.testing.assert_close(logits[1], logits[0], rtol=1e-5, atol=1e-5)
    assert not torch.allclose(logits[2], logits[0], atol=1e-3)
    translations = [translate(m, tokenizer, sources, num_beams=4) for m in (adapter, merged, base)]
    assert translations[0] == translations[1]  # the paper's beam search: transformers' loop and the fast decoder
    assert translations[0] != translations[2]


def test_translate_and_evaluate_use_the_adapter_folder(lora_run, tiny_model_dir, tmp_path):
    """The commands decode the base model with the adapter as peft itself loads it, not the base alone."""
    import json

    from peft import PeftModel
    from tiny_model import load_script
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    pairs = held_out_pairs()[:48]
    sources, references = zip(*pairs, strict=True)
    source_file, reference_file = (
        write_lines(tmp_path / "src.en", sources),
        write_lines(tmp_path / "ref.de", references),
    )
    from vanilla_transformer.serving.search import translate

    peft_model = PeftModel.from_pretrained(AutoModelForSeq2SeqLM.from_pretrained(tiny_model_dir), lora_run).eval()
    # the commands' search (the paper's, width 1 here, which is not greedy: a sentence that ends stays a candidate
    # while the beam goes on) on the adapter as peft itself loads it
    expected = translate(peft_model, AutoTokenizer.from_pretrained(lora_run), sources, num_beams=1)

    outputs = {}
    for name, model in (("lora", lora_run), ("base", tiny_model_dir)):
        output = tmp_path / f"{name}.de"
        argv = ["--model", str(model), "--input", str(source_file), "--output", str(output), "--num-beams", "1"]
        assert load_script("translate").main(argv) == 0
        outputs[name] = output.read_text(encoding="utf-8").splitlines()
    assert outputs["lora"] == expected
    assert outputs["base"] != expected

    results = tmp_path / "scores.json"
    argv = ["--model", str(lora_run), "--source", str(source_file), "--reference", str(reference_file)]
    assert load_script("evaluate").main([*argv, "--num-beams", "1", "--results", str(results)]) == 0
    exact = 100 * sum(h == r for h, r in zip(expected, references, strict=True)) / len(references)
    assert json.loads(results.read_text())["exact_match"] == pytest.approx(exact)


def test_attention_maps_of_an_adapter_folder_are_the_adapted_models(lora_run, tiny_model_dir, tmp_path):
    import numpy as np
    from tiny_model import load_script

    from vanilla_transformer.model_dir import load_model_dir
    from vanilla_transformer.visualization import compute_attention

    source, target = held_out_pairs()[0]
    argv = [str(lora_run), source, "--target", target, "--output-dir", str(tmp_path / "maps"), "--kinds", "cross"]
    assert load_script("attention").main(argv) == 0
    assert sorted(path.name for path in (tmp_path / "maps").glob("*.png")) == ["cross_layer1.png", "cross_layer2.png"]
    maps = {
        name: compute_attention(*load_model_dir(directory), source, target).cross
        for name, directory in (("lora", lora_run), ("merged", lora_run / "merged"), ("base", tiny_model_dir))
    }
    np.testing.assert_allclose(maps["lora"], maps["merged"], atol=1e-5)
    assert not np.allclose(maps["lora"], maps["base"], atol=1e-3)  # the adapter's q_proj changes the attention


def test_push_dry_run_of_an_adapter_folder_names_the_hub_base(lora_run, tmp_path):
    import json

    from huggingface_hub import ModelCard
    from safetensors.torch import load_file
    from tiny_model import load_script

    push = load_script("push")
    with pytest.raises(ValueError, match="--base-model"):  # a local base path is no use to others
        push.main([str(lora_run), "org/tiny-lora", "--dry-run", str(tmp_path / "refused")])
    folder = tmp_path / "upload"
    assert push.main([str(lora_run), "org/tiny-lora", "--dry-run", str(folder), "--base-model", "org/tiny"]) == 0

    names = {path.name for path in folder.iterdir()}
    assert names == {"README.md", "adapter_config.json", "adapter_model.safetensors", "tokenizer.json",
                     "tokenizer_config.json", "training_summary.json"}  # fmt: skip
    assert json.loads((folder / "adapter_config.json").read_text())["base_model_name_or_path"] == "org/tiny"
    card = ModelCard.load(folder / "README.md")
    assert (card.data.base_model, card.data.library_name) == ("org/tiny", "peft")
    assert 'PeftModel.from_pretrained(base, "org/tiny-lora")' in card.text
    uploaded, trained = (
        load_file(folder / "adapter_model.safetensors"),
        load_file(lora_run / "adapter_model.safetensors"),
    )
    assert uploaded.keys() == trained.keys() and all(torch.equal(uploaded[k], trained[k]) for k in trained)


def test_base_and_adapter_load_as_remote_code_without_the_package(lora_run, tiny_model_dir, tmp_path):
    """peft's own loading over the remote-code base, in a process where vanilla_transformer cannot be imported."""
    from vanilla_transformer.model_dir import load_model_dir

    sources = [source for source, _ in held_out_pairs()[:24]]
    model, tokenizer = load_model_dir(lora_run)
    expected = greedy(model, tokenizer, sources)
    body = f"""
        import torch
        from peft import PeftModel
        from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

        torch.set_num_threads(1)
        tokenizer = AutoTokenizer.from_pretrained({str(lora_run)!r})
        base = AutoModelForSeq2SeqLM.from_pretrained({str(tiny_model_dir)!r}, trust_remote_code=True)
        batch = tokenizer({sources!r}, padding=True, return_tensors="pt")

        def greedy(model):
            output = model.generate(**batch, num_beams=1, do_sample=False, max_new_tokens=40)
            return tokenizer.batch_decode(output, skip_special_tokens=True)

        plain = greedy(base)
        model = PeftModel.from_pretrained(base, {str(lora_run)!r}).eval()
        result = dict(module=type(model.get_base_model()).__module__, plain=plain, adapted=greedy(model))
        print("\\nRESULT", json.dumps(result))
        """
    loaded = run_without_package(body, cwd=tmp_path)
    assert loaded["module"].startswith("transformers_modules.")
    assert loaded["adapted"] == expected
    assert loaded["plain"] != expected


def test_bad_lora_options_and_adapter_folders_fail_early(lora_run, tiny_model_dir, tmp_path, capsys):
    import json
    import shutil

    from tiny_model import load_script

    from vanilla_transformer.model_dir import load_model_dir

    finetune = load_script("finetune")
    common = [str(tiny_model_dir), "--numbers", "20", "--output-dir", str(tmp_path / "out")]
    for options, message in (
        (["--lora", "--lora-r", "0"], "--lora-r"),
        (["--lora", "--lora-alpha", "0"], "--lora-alpha"),
        (["--lora", "--lora-dropout", "1"], "--lora-dropout"),
        (["--merge"], "--merge need(s) --lora"),
        (["--lora-r", "4"], "--lora-r need(s) --lora"),
    ):
        with pytest.raises(SystemExit):
            finetune.parse_options([*common, *options])
        assert message in capsys.readouterr().err, options
    with pytest.raises(SystemExit):
        finetune.main([*common, "--lora", "--lora-target-modules", "q_proj,query,lm_head"])
    error = capsys.readouterr().err
    assert "['query', 'lm_head']" in error and "fc1, fc2, k_proj, out_proj, q_proj, v_proj" in error
    with pytest.raises(SystemExit):  # an adapter folder is not a model to fine-tune
        finetune.main([str(lora_run), "--numbers", "20", "--output-dir", str(tmp_path / "out"), "--lora"])
    assert "adapter folder" in capsys.readouterr().err

    moved = tmp_path / "moved-adapter"
    shutil.copytree(lora_run, moved, ignore=shutil.ignore_patterns("checkpoint-*", "merged"))
    config = json.loads((moved / "adapter_config.json").read_text())
    config["base_model_name_or_path"] = str(tmp_path / "gone" / "base")
    (moved / "adapter_config.json").write_text(json.dumps(config))
    with pytest.raises(FileNotFoundError, match="moved-adapter") as raised:
        load_model_dir(moved)
    assert f"tried the directory {tmp_path / 'gone' / 'base'}" in str(raised.value)
    (moved / "adapter_model.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match="has no adapter_model.safetensors"):
        load_model_dir(moved)


def test_the_lora_benchmarks_marian_twin_computes_what_the_adapted_model_does(copy_model, copy_batch):
    """scripts/benchmark_lora.py times MarianMT with the same adapter against ours; its twin must be the same
    function: equal logits, and with the permutation left out of the adapter's matrices, different ones."""
    from benchmark_lora import marian_with_adapter

    model, _ = copy_model
    adapted = with_lora(model, seed=3)
    twin = marian_with_adapter(adapted, ["q_proj", "v_proj"], r=8, alpha=16)
    decoder_input_ids = copy_batch["input_ids"][:, :-1].clone()
    decoder_input_ids[:, 0] = model.config.decoder_start_token_id
    with torch.no_grad():
        expected = adapted(**copy_batch, decoder_input_ids=decoder_input_ids).logits
        assert torch.allclose(twin(**copy_batch, decoder_input_ids=decoder_input_ids).logits, expected, atol=1e-4)
        broken = marian_with_adapter(adapted, ["q_proj", "v_proj"], r=8, alpha=16)
        ours = dict(adapted.named_parameters())
        for name, parameter in broken.named_parameters():
            if ".lora_" in name:
                parameter.copy_(ours[name])  # unpermuted
        assert not torch.allclose(
            broken(**copy_batch, decoder_input_ids=decoder_input_ids).logits, expected, atol=1e-2
        )


def test_the_adapter_card_links_its_base_on_the_hub_absolutely(lora_run):
    """A card is read on the Hub, where a relative link points into the adapter's own repository."""
    from vanilla_transformer.export.hub import build_adapter_card
    from vanilla_transformer.model_dir import load_model_dir

    model, _ = load_model_dir(lora_run)
    card = build_adapter_card(
        model, {"dataset_name": "numbers", "exact_match": 50.0}, "org/adapter", base_model="org/base"
    )
    assert "[`org/base`](https://huggingface.co/org/base)" in card.text and "](org/base)" not in card.text
    assert "exact match 50.0%" in card.text  # the scores without BLEU are shown too
    local = build_adapter_card(model, {}, "org/adapter", base_model="runs/numbers/model").text
    assert "`runs/numbers/model`" in local and "](runs/numbers/model)" not in local


def test_finetunes_lora_initialisation_follows_its_seed_not_the_process_history(tiny_model_dir):
    """Two preparations with --seed 7, one after the process drew random numbers: the same new adapter."""
    from tiny_model import load_script

    finetune = load_script("finetune")
    lora = finetune.LoraArguments(lora=True)
    adapters = []
    for draws in (0, 5):
        torch.rand(draws)
        model, _ = finetune.prepare_model(finetune.build_parser(), str(tiny_model_dir), lora, seed=7)
        adapters.append({name: p.detach().clone() for name, p in model.named_parameters() if "lora_A" in name})
    assert adapters[0] and adapters[0].keys() == adapters[1].keys()
    assert all(torch.equal(adapters[0][name], adapters[1][name]) for name in adapters[0])
