"""scripts/count_ops.py: operator counts of a training step and a decoding step, ours against MarianMT's."""

import json

import count_ops
import torch


def test_counts_are_what_the_operators_are_and_repeat_exactly():
    """The dispatch-level count of a known function, and the whole count at a tiny size run twice: counts are not
    timings, so a rerun gives the same file."""
    x, weight, bias = torch.randn(3, 4), torch.randn(5, 4), torch.randn(5)
    counts = count_ops.operators(lambda: torch.nn.functional.linear(x, weight, bias).relu().view(-1))
    report = count_ops.summary(counts)
    # linear is t (a view) and addmm; relu; view: 4 operators, 2 kernels
    assert report["operators"] == 4 and report["kernels"] == 2
    assert report["top_kernels"] == {"aten::addmm": 1, "aten::relu": 1}
    first = count_ops.count("tiny", 60, batch_size=4, decode_batch_size=2, steps=2, seed=0)
    second = count_ops.count("tiny", 60, batch_size=4, decode_batch_size=2, steps=2, seed=0)
    assert json.dumps(first) == json.dumps(second)
    training = first["training_step"]
    # Packing adds its gathers and scatters (the batch is padded); the decoding steps were counted on both models.
    assert training["ours, pack_tokens=True (CPU)"]["kernels"] > training["ours, pack_tokens=False (CUDA)"]["kernels"]
    assert set(first["decoding_step"]) == {"greedy", "beam 4"}
    for reports in first["decoding_step"].values():
        assert set(reports) == {"ours", "MarianMT"} and all(r["kernels"] > 0 for r in reports.values())


def test_a_decoding_step_is_the_difference_of_k_and_2k_steps():
    """One step of our greedy decoding counted directly on the decoder equals the script's difference count."""
    ours, _ = count_ops.build_models("tiny", 60, seed=0)
    batch = count_ops.random_batch(60, 2, seed=0)
    by_difference = count_ops.decoding_step(ours, batch, num_beams=1, steps=2)
    steps = []
    real_step = count_ops.IncrementalDecoder.step

    def counted(decoder, tokens):
        logits = []
        counts = count_ops.operators(lambda: logits.append(real_step(decoder, tokens)))
        steps.append(count_ops.summary(counts)["kernels"])
        return logits[0]

    count_ops.IncrementalDecoder.step = counted
    try:
        ours.generate(**{k: batch[k] for k in ("input_ids", "attention_mask")}, max_new_tokens=3, num_beams=1)
    finally:
        count_ops.IncrementalDecoder.step = real_step
    assert len(set(steps)) == 1  # every step the same operators
    # the step itself, and the search's own per-step operators around it
    assert steps[0] < by_difference["kernels"] < 2 * steps[0]


def test_the_results_file_is_the_same_on_a_rerun_and_renders_its_figures(tmp_path):
    """The record of counts (`bench.Record`, timed=False) leaves out the clock and the load: a rerun writes the
    same file, whose figures render."""
    results = tmp_path / "results"
    arguments = [
        "--size",
        "tiny",
        "--vocab-size",
        "60",
        "--batch-size",
        "4",
        "--decode-batch-size",
        "2",
        "--steps",
        "2",
    ]
    texts = []
    for _ in range(2):
        assert count_ops.main([*arguments, "--output", str(results / "op_counts.json")]) == 0
        texts.append((results / "op_counts.json").read_text())
    assert texts[0] == texts[1]
    written = json.loads(texts[0])
    assert written["command"].startswith("python scripts/count_ops.py --size tiny --vocab-size 60")
    assert "load_average_start" not in written and written["versions"]["torch"] == torch.__version__
    assert f"torch {torch.__version__}" in count_ops.op_counts_setup(results)
    assert "MarianMT" in count_ops.op_counts(results)
