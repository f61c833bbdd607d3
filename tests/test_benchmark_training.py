"""scripts/benchmark_training.py: the contestants' settings, which run by default, and the interleaved harness end to
end at a tiny size (no timing is asserted: only what was run, in which order, on how many tokens)."""

import json
import random

import benchmark_training as bench
import pytest
import torch
from bench import adam, contestants, processes

WORDS = "a red blue green dog cat bird man woman child runs sits eats sees the small big old".split()


def write_corpus(folder, pairs=600, seed=0):
    """A Multi30k-like corpus (train.en / train.de, one sentence per line, aligned) of 3 to 12 words a side, the
    target about as long as its source (as in translations)."""
    rng = random.Random(seed)
    folder.mkdir()
    sides = {"en": [], "de": []}
    for _ in range(pairs):
        length = rng.randint(3, 11)
        for side, words in zip(sides.values(), (length, length + rng.randint(-1, 1)), strict=True):
            side.append(" ".join(rng.choice(WORDS) for _ in range(words)))
    for language, lines in sides.items():
        (folder / f"train.{language}").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder


def test_contestants_are_parsed_with_defaults_and_checked():
    specs = contestants.parse_contestants(
        "ours, trainer:compile=inductor,optim=adamw_torch ours:adam=fused attn=eager"
    )
    assert [spec.name for spec in specs] == [
        "ours:precision=no,compile=no,adam=default,attn=sdpa",
        "trainer:precision=no,compile=inductor,optim=adamw_torch,attn=sdpa",
        "ours:precision=no,compile=no,adam=fused,attn=eager",
    ]
    assert [spec.is_baseline for spec in specs] == [True, False, False]
    for bad in ("ours:adam=sgd", "theirs:precision=no", "ours:optim=adamw_torch", "ours ours", "compile=no"):
        with pytest.raises(ValueError):
            contestants.parse_contestants(bad)


def test_ours_compiles_the_whole_model_as_one_graph_only_when_asked(monkeypatch):
    """``compile=whole`` is ours alone: train's inductor backend with regional compilation turned off in the worker,
    as ``accelerate launch`` turns it off; ``compile=inductor`` leaves train's default (layer by layer)."""
    with pytest.raises(ValueError):
        contestants.parse_contestants("trainer:compile=whole")
    args = bench.build_parser().parse_args(["--model-size", "tiny"])
    args.vocab_size, args.max_tokens, args.grad_accum = 512, 256, 1  # set from the data where not given
    whole, regional = contestants.Spec.parse("ours:compile=whole"), contestants.Spec.parse("ours:compile=inductor")
    assert contestants.ours_config(args, whole).optimization.dynamo_backend == "inductor"
    assert contestants.ours_config(args, regional).optimization.dynamo_backend == "inductor"
    seen = {}

    def build_trainer(*_, **__):
        seen["regional"] = contestants.os.environ.get("ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION")
        raise RuntimeError("stop here")

    monkeypatch.delenv("ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION", raising=False)
    monkeypatch.setattr(contestants, "build_trainer", build_trainer)
    monkeypatch.setattr(contestants, "initial_model", lambda *_: None)
    for spec, expected in ((regional, None), (whole, "false")):
        with pytest.raises(RuntimeError, match="stop here"):
            contestants.ours_worker(args, spec, channel=None)
        assert seen["regional"] == expected


def test_bf16_contestants_run_by_default_only_where_bf16_is_native(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    args = bench.build_parser().parse_args([])
    bf16 = {name for name in bench.DEFAULT_CONTESTANTS if "precision=bf16" in name}
    assert bf16, "the defaults must include bf16 contestants (the best settings on GPUs and AVX-512 BF16 CPUs)"

    monkeypatch.setattr("vanilla_transformer.environment.cpu_flags", lambda: {"avx2", "fma"})
    specs, skipped = bench.select_contestants(args)
    assert {contestants.Spec.parse(name).name for name in bf16} == set(skipped)
    assert all("native bf16" in reason for reason in skipped.values())
    assert all(spec["precision"] in ("no", None) for spec in specs)  # None: train's default, which resolves it
    assert len(specs) == len(bench.DEFAULT_CONTESTANTS) - len(bf16)

    monkeypatch.setattr("vanilla_transformer.environment.cpu_flags", lambda: {"avx2", "avx512_bf16"})
    specs, skipped = bench.select_contestants(args)
    assert not skipped and len(specs) == len(bench.DEFAULT_CONTESTANTS)

    monkeypatch.setattr("vanilla_transformer.environment.cpu_flags", lambda: {"avx2"})
    named = bench.build_parser().parse_args(["--contestants", "ours:precision=bf16"])
    assert bench.select_contestants(named) == ([contestants.Spec.parse("ours:precision=bf16")], {})


def test_harness_interleaves_both_sides_on_the_same_tokens_per_step(tmp_path, capsys):
    data_dir = write_corpus(tmp_path / "multi30k")
    output = tmp_path / "result.json"
    ours, trainer = "ours:precision=no,compile=no", "trainer:precision=no,compile=no"
    argv = ["--data-dir", str(data_dir), "--model-size", "tiny", "--vocab-size", "400", "--max-tokens", "512"]
    argv += ["--threads", "1", "--rounds", "2", "--steps-per-round", "8", "--warmup-steps", "1"]
    assert bench.main([*argv, "--contestants", f"{ours} {trainer}", "--output", str(output)]) == 0

    result = json.loads(output.read_text())
    names = [contestants.Spec.parse(ours).name, contestants.Spec.parse(trainer).name]
    assert result["order"] == [names, names[::-1]]  # the second round runs in reverse
    rows = result["contestants"]
    assert list(rows) == names and result["skipped"] == {}
    for row in rows.values():
        assert row["steps"] == 16 and len(row["round_tokens_per_second"]["all"]) == 2
        assert 0 < row["tokens_per_step"] < row["padded_tokens_per_step"]  # padding is not counted
        assert row["tokens_per_second"] == pytest.approx(row["tokens_per_step"] * row["steps"] / row["seconds"])
        assert row["warmup_seconds"] > 0 and not row["warmup_compilations"]  # eager: nothing compiled
    assert rows[names[0]]["padded_tokens_per_step"] <= 512  # TokenBatchSampler's bound
    assert rows[names[0]]["data_seconds"] > 0 and rows[names[1]]["data_seconds"] is None
    for measure in ("padded_tokens_per_step", "tokens_per_step"):  # padded: what the Trainer's batch size matches
        ours_step, trainer_step = rows[names[0]][measure], rows[names[1]][measure]
        assert abs(ours_step - trainer_step) <= 0.25 * max(ours_step, trainer_step), measure
    assert result["ratio"] == pytest.approx(rows[names[0]]["tokens_per_second"] / rows[names[1]]["tokens_per_second"])
    assert (result["ours_best"], result["trainer_best"]) == tuple(names)
    assert result["data"]["batch_size"] >= 1
    assert result["settings"]["threads"] == 1 and result["load_average_start"] and result["versions"]["torch"]
    assert f"TRAINING ours_best={names[0]} trainer_best={names[1]} ratio=" in capsys.readouterr().out


def test_a_training_preset_sets_the_model_vocabulary_and_tokens_per_step():
    """--preset wmt14-base is the paper's base model at 50,000 tokens a step: 4 micro-batches of 12,500 on one GPU
    (`micro_batch_plan`); options given explicitly win."""
    args = bench.resolve(bench.build_parser().parse_args(["--preset", "wmt14-base", "--device", "cpu"]))
    assert (args.model_size, args.vocab_size, args.max_tokens, args.grad_accum) == ("base", 37_000, 12_500, 4)
    args = bench.resolve(bench.build_parser().parse_args(["--preset", "wmt14-base", "--grad-accum", "1"]))
    assert args.grad_accum == 1 and args.max_tokens == 12_500
    plain = bench.resolve(bench.build_parser().parse_args([]))
    assert (plain.model_size, plain.vocab_size, plain.max_tokens, plain.grad_accum) == ("multi30k", 8000, 4096, 1)


def tiny_config(**overrides):
    from vanilla_transformer import VanillaTransformerConfig

    return VanillaTransformerConfig.from_preset("tiny", vocab_size=50, **overrides)


def fixed_batch():
    from bench import collate

    return collate([([5, 6, 7, 3], [8, 9, 3]), ([10, 3], [11, 12, 13, 14, 3]), ([15, 16, 3], [17, 3])])


def test_plain_torch_loss_is_the_label_smoothed_cross_entropy_of_its_logits_and_its_step_learns():
    """The plain-PyTorch contestant: its summed loss is section 5.4's label smoothing written out by hand (1 - eps
    on the reference, eps spread over the vocabulary) over the real target tokens; the decoder sees no later
    target token and the encoder no padding; and its optimizer step lowers the loss of a fixed batch."""
    from bench.plain_torch import PlainTransformer, plain_step

    torch.manual_seed(0)
    model, batch = PlainTransformer(tiny_config(dropout=0.0)).eval(), fixed_batch()
    logits = model.logits(**batch)
    log_probs = torch.log_softmax(logits.float(), dim=-1)
    real = batch["labels"] != -100
    reference = log_probs.gather(-1, batch["labels"].clamp(min=0)[..., None])[..., 0]
    by_hand = -(0.9 * reference + 0.1 * log_probs.mean(-1))[real].sum()
    assert model(**batch, label_smoothing=0.1).item() == pytest.approx(by_hand.item(), rel=1e-5)

    changed = {**batch, "labels": batch["labels"].clone(), "input_ids": batch["input_ids"].clone()}
    changed["labels"][0, 2] = 20  # a later target token: the positions before it see nothing of it
    assert torch.allclose(model.logits(**changed)[0, :2], logits[0, :2], atol=1e-5)
    changed["input_ids"][1, 3] = 30  # under the padding mask: nothing changes
    assert torch.allclose(model.logits(**changed)[1], logits[1], atol=1e-5)

    step = plain_step(model.train(), adam(model, 1e-3, "auto"))
    losses = [step([batch]).item() for _ in range(8)]
    assert losses[0] == pytest.approx(by_hand.item() / real.sum().item(), rel=1e-5)  # per target token of the step
    assert losses[-1] < 0.8 * losses[0]


def test_the_default_contestant_takes_trains_choices_and_the_extras_are_named():
    args = bench.resolve(bench.build_parser().parse_args(["--preset", "multi30k", "--model-size", "tiny"]))
    default = contestants.Spec.parse("ours:default")
    assert default.default and default.name == "ours:default" and not default.is_baseline
    config = contestants.ours_config(args, default)
    from vanilla_transformer.training import parse_args

    preset = parse_args(["--preset", "multi30k"])
    for name in ("mixed_precision", "dynamo_backend", "adam_implementation"):  # none given: the preset's own
        assert getattr(config.optimization, name) == getattr(preset.optimization, name), name
    assert config.model.attn_implementation == preset.model.attn_implementation == "auto"  # resolved by the device
    one = contestants.Spec.parse("ours:default,micro=one")
    assert one.name == "ours:default,micro=one"
    assert contestants.ours_config(args, one).optimization.max_tokens == args.max_tokens * args.grad_accum
    trainer = contestants.Spec.parse("trainer:precision=bf16,cudnn=off")
    assert trainer.name == "trainer:precision=bf16,compile=no,optim=adamw_torch_fused,attn=sdpa,cudnn=off"
    assert trainer["cudnn"] == "off" and contestants.Spec.parse("torch")["cudnn"] == "on"
    refused = (
        "ours:default,precision=bf16",
        "torch:attn=eager",
        "trainer:default",
        "torch:cudnn=maybe",
        "trainer:micro=one",
    )
    for bad in refused:
        with pytest.raises(ValueError):
            contestants.parse_contestants(bad)
    with pytest.raises(SystemExit, match="--contestants.*'sgd'"):  # one line naming the option, no traceback
        bench.main(["--contestants", "ours:sgd", "--device", "cpu"])


def test_default_torch_and_trainer_run_end_to_end_on_the_same_batches(tmp_path):
    """``ours:default`` (the numbers preset's: nothing compiled, fp32 on this CPU), plain PyTorch and the Trainer,
    tiny, on synthetic pairs: the default is marked with what the Accelerator and the model resolved to, plain
    PyTorch trains on exactly our batches, every row has its MFU, and the default is compared with both."""
    output = tmp_path / "result.json"
    argv = ["--device", "cpu", "--preset", "numbers", "--synthetic-pairs", "300", "--model-size", "tiny"]
    argv += ["--vocab-size", "400", "--max-tokens", "512", "--grad-accum", "2", "--threads", "1", "--rounds", "2"]
    argv += ["--steps-per-round", "2", "--warmup-steps", "1", "--output", str(output)]
    assert bench.main([*argv, "--contestants", "ours:default torch:precision=no,compile=no trainer"]) == 0
    result = json.loads(output.read_text())
    rows = result["contestants"]
    default, plain = rows["ours:default"], rows["torch:precision=no,compile=no"]
    assert default["default"] is True and default["kind"] == "ours" and plain["kind"] == "torch"
    settings = {key: default[key] for key in ("precision", "compile", "attn", "adam")}
    assert settings == {"precision": "no", "compile": "no", "attn": "sdpa", "adam": "default"}
    assert default["resolved"] == {  # as results.json records them; the micro-batches as given
        "tokens_per_step": 1024, "tokens_per_micro_batch": 512, "micro_batches": 2, "num_processes": 1,
        "mixed_precision": "no", "attn_implementation": "sdpa", "sdpa_backends": None, "dynamo_backend": None,
    }  # fmt: skip
    assert "default" not in plain and result["default"] == "ours:default"
    for measure in ("tokens_per_step", "padded_tokens_per_step"):
        assert plain[measure] == default[measure], measure  # the same batches
    assert plain["batches"] == {"tokens_per_micro_batch": 512, "micro_batches": 2, "default_plan": True}
    trainer_batches = rows[result["trainer_best"]]["batches"]  # the Trainer's batch is fixed, not the plan
    assert trainer_batches["micro_batches"] == 2 and trainer_batches["default_plan"] is False
    assert all(row["mfu"] > 0 and row["matmul_flops_per_second"] > 0 for row in rows.values())
    assert result["default_vs_torch_best"] == pytest.approx(default["tokens_per_second"] / plain["tokens_per_second"])
    trainer = rows[result["trainer_best"]]
    assert result["default_vs_trainer_best"] == pytest.approx(
        default["tokens_per_second"] / trainer["tokens_per_second"]
    )
    assert "ours: train's default (fp32, eager, Adam, SDPA, 2 x 512 tokens)" in bench.contestants_table(result)


def test_the_default_contestant_builds_trains_trainer_with_its_micro_batch_plan(tmp_path, monkeypatch):
    """``ours:default`` at the wmt14-base preset builds its `Trainer` as ``train`` does: on a (mocked) CUDA memory
    reading that holds 60,000 tokens, both take the preset's 50,000-token step as 1 micro-batch, and what the
    contestant records (`Trainer.resolved_settings`) equals what a real ``train`` run, tiny, writes in its
    results.json. This CPU is made to report no native bf16, so that neither side compiles."""
    from accelerate.state import AcceleratorState

    from vanilla_transformer.training import parse_args, train
    from vanilla_transformer.training import run as run_module
    from vanilla_transformer.training import trainer as trainer_module

    monkeypatch.setattr(trainer_module, "tokens_in_memory", lambda accelerator, model, max_length: 60_000)
    monkeypatch.setattr(run_module, "cpu_flags", lambda: {"avx2", "fma"})
    argv = ["--device", "cpu", "--preset", "wmt14-base", "--model-size", "tiny", "--vocab-size", "400"]
    args = bench.resolve(bench.build_parser().parse_args([*argv, "--synthetic-pairs", "200", "--threads", "1"]))
    assert args.planned and (args.max_tokens, args.grad_accum) == (12_500, 4)  # the plan without the GPU's memory
    args.data = tmp_path / "data"
    args.data.mkdir()
    bench.build_data(args, args.data)
    AcceleratorState._reset_state(reset_partial_state=True)
    recorded = contestants.ours_trainer(args, contestants.Spec.parse("ours:default")).resolved_settings()
    assert (recorded["micro_batches"], recorded["tokens_per_micro_batch"]) == (1, 50_000)
    one = contestants.ours_trainer(args, contestants.Spec.parse("ours:default,micro=one")).resolved_settings()
    assert (one["micro_batches"], one["tokens_per_micro_batch"]) == (1, 50_000)
    fixed = contestants.ours_trainer(args, contestants.Spec.parse("ours:default,micro=fixed")).resolved_settings()
    assert (fixed["micro_batches"], fixed["tokens_per_micro_batch"]) == (
        4,
        12_500,
    )  # what the plan is measured against

    AcceleratorState._reset_state(reset_partial_state=True)
    options = ["--preset", "wmt14-base", "--dataset", "numbers", "--valid-split", "valid", "--test-split", "test"]
    options += ["--model", "tiny", "--vocab-size", "400"]
    options += ["--num-train", "160", "--num-valid", "8", "--num-test", "4", "--max-steps", "1", "--warmup-steps", "1"]
    options += ["--eval-every", "100", "--num-threads", "1", "--output-dir", str(tmp_path / "run")]
    results = train(parse_args(options))
    AcceleratorState._reset_state(reset_partial_state=True)
    assert recorded == {key: results[key] for key in recorded}
    assert recorded["mixed_precision"] == "no" and recorded["dynamo_backend"] is None


def test_plain_pytorch_takes_the_micro_batches_the_default_planned(tmp_path, monkeypatch):
    """On a (mocked) CUDA memory reading of 60,000 tokens, ``ours:default`` at wmt14-base plans its step as 1 x 50,000
    where the benchmark's fixed micro-batches are 4 x 12,500. The coordinator starts the default's worker first and
    gives plain PyTorch's worker that plan: its micro-batches are the default's; ``micro=fixed`` keeps 4 x 12,500.
    (The workers here are stand-ins that answer as the real ones do; the default's answer is its real Trainer's.)"""
    from accelerate.state import AcceleratorState

    from vanilla_transformer.training import run as run_module
    from vanilla_transformer.training import trainer as trainer_module

    monkeypatch.setattr(trainer_module, "tokens_in_memory", lambda accelerator, model, max_length: 60_000)
    monkeypatch.setattr(run_module, "cpu_flags", lambda: {"avx2", "fma"})
    argv = ["--device", "cpu", "--preset", "wmt14-base", "--model-size", "tiny", "--vocab-size", "400"]
    argv += ["--synthetic-pairs", "200", "--threads", "1", "--rounds", "1", "--steps-per-round", "1"]
    args = bench.resolve(bench.build_parser().parse_args(argv))
    args.data = tmp_path / "data"
    args.data.mkdir()
    bench.build_data(args, args.data)
    AcceleratorState._reset_state(reset_partial_state=True)
    resolved = contestants.ours_trainer(args, contestants.Spec.parse("ours:default")).resolved_settings()
    AcceleratorState._reset_state(reset_partial_state=True)
    assert (resolved["tokens_per_micro_batch"], resolved["micro_batches"]) == (50_000, 1)

    started = {}

    class StandIn:
        def __init__(self, script, options, threads, log, name):
            self.name, started[name] = name, options

        def receive(self):
            return {"event": "ready", "device": "cpu", "resolved": resolved if self.name == "ours:default" else None}

        def ask(self, **command):
            return {"steps": command["steps"]}

        def stop(self):
            pass

    monkeypatch.setattr(processes, "Worker", StandIn)
    torch_spec, fixed = "torch:precision=bf16,compile=inductor", "torch:precision=bf16,compile=inductor,micro=fixed"
    specs = contestants.parse_contestants(f"{torch_spec} {fixed} ours:default")
    processes.run_contestants(bench.__file__, args, specs, args.data, 8)
    assert list(started)[0] == "ours:default"  # started, and its plan read, before the others
    for name, expected in ((torch_spec, (50_000, 1)), (fixed, (12_500, 4))):
        worker_args = bench.resolve(bench.build_parser().parse_args([*started[name], "--threads", "1"]))
        assert contestants.micro_batches(worker_args, contestants.Spec.parse(name)) == expected, name
