"""What a run leaves: the exported (averaged) model and its training summary."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

from accelerate import Accelerator
from transformers import AutoTokenizer, PreTrainedTokenizerBase

from ..atomic import write_file
from ..data import split_files
from ..model_dir import save_model_dir
from ..model_summary import build_summary, write_training_summary
from ..modeling_vanilla_transformer import (
    VanillaTransformerForConditionalGeneration,
)
from ..serving.search import paper_generation_config
from .checkpoints import (
    average_checkpoints,
    list_checkpoints,
    load_weights,
)
from .config import DecodingConfig, TrainingConfig
from .run_dir import RunLayout, check_run_dir_links, load_saved_config
from .setup import RunCorpus, build_model_config
from .tracking import plot_metrics


def export_model(
    model, tokenizer: PreTrainedTokenizerBase, directory: Path, decoding: DecodingConfig, max_length: int
) -> Path:
    """The final model directory, decoding with the run's beam search settings: its beam size, alpha and maximum
    output length (input length + ``max_length_offset``, at most `max_length` + that), the search its test set was
    scored with."""
    generation_config = paper_generation_config(
        model.config, **decoding.search(), max_new_tokens=max_length + decoding.max_length_offset
    )
    return save_model_dir(model, tokenizer, directory, generation_config=generation_config)


def write_results(
    accelerator: Accelerator, config: TrainingConfig, corpus: RunCorpus, results: dict[str, Any]
) -> None:
    """Log the results' figures, and on the main process write ``results.json``, the model's training summary (for
    its card) and ``metrics.png`` into the run directory."""
    accelerator.log({name: value for name, value in results.items() if isinstance(value, float)}, step=results["step"])
    if accelerator.is_main_process:
        layout = RunLayout(config.checkpointing.output_dir)
        write_file(layout.results, json.dumps(results, indent=2) + "\n")
        write_training_summary(layout.model, training_summary(config, corpus, results))
        plot_metrics(layout.metrics, layout.metrics_plot, required=False)


LOCAL_KINDS = {"text": "plain-text", "tsv": "TSV", "jsonl": "JSON Lines"}
"""The corpus kinds read from the user's own files, and how the model card names their format."""


def local_data_description(corpus: RunCorpus) -> dict[str, str] | None:
    """How the model card names a corpus read from the user's own files (``--dataset text/tsv/jsonl`` with
    ``--data-dir``, or ``--train-src`` and the other split files): by file and folder names only, never an absolute
    path, which would say where the files lay on the training machine and nothing about the data.

    Returns:
        None for the built-in numbers task and Hugging Face datasets; else ``dataset_name`` (e.g. ``"local TSV
        files in my-corpus"``), ``local_data`` (e.g. ``"train.tsv (training), valid.tsv (validation) and test.tsv
        (test) in the folder my-corpus"``) and ``notes``, the card's line naming the files and the languages.
    """
    spec = corpus.spec
    if spec.kind not in LOCAL_KINDS:
        return None
    roles = {"train": "training", "valid": "validation", "test": "test"}
    files = {role: split_files(spec, corpus.names[split]) for split, role in roles.items()}
    folders = {path.resolve().parent for paths in files.values() for path in paths}
    folder = (folders.pop().name or None) if len(folders) == 1 else None
    by_files: dict[str, list[str]] = {}  # the same files may serve two roles (validation and test)
    for role, paths in files.items():
        shown = " + ".join(path.name if folder else f"{path.resolve().parent.name}/{path.name}" for path in paths)
        by_files.setdefault(shown, []).append(role)
    parts = [f"{shown} ({' and '.join(split_roles)})" for shown, split_roles in by_files.items()]
    listed = parts[0] if len(parts) == 1 else f"{', '.join(parts[:-1])} and {parts[-1]}"
    where = f" in the folder {folder}" if folder else ""
    label = LOCAL_KINDS[spec.kind]
    return {
        "dataset_name": f"local {label} files{where}",
        "local_data": f"{listed}{where}",
        "notes": (
            f"Trained on local {label} files, not a Hugging Face Hub dataset: {listed}{where}; "
            f"{spec.src_lang} → {spec.tgt_lang}."
        ),
    }


def training_summary(config: TrainingConfig, corpus: RunCorpus, results: dict[str, Any]) -> dict[str, Any]:
    """The run's figures for the model card, from its ``results.json`` (`results`), built by
    `vanilla_transformer.model_summary.build_summary`. A Hugging Face dataset is named by its Hub id; the user's own
    files by their names and folder (`local_data_description`), with no Hub id."""
    hub_dataset = config.data.dataset.removeprefix("hf:") if config.data.dataset.startswith("hf:") else None
    local = local_data_description(corpus)
    notes = None if hub_dataset else f"trained on the {config.data.dataset!r} data of vanilla-transformer"
    if local:
        notes = local["notes"]
    return build_summary(
        dataset=hub_dataset,
        dataset_name=hub_dataset or (local["dataset_name"] if local else config.data.dataset),
        local_data=local["local_data"] if local else None,
        dataset_config=config.data.dataset_config if hub_dataset else None,
        src_lang=config.data.src_lang,
        tgt_lang=config.data.tgt_lang,
        train_pairs=results.get("train_pairs"),
        eval_split=config.data.test_split,
        steps=results["step"],
        epochs=results.get("epochs"),
        train_hours=results["train_minutes"] / 60,
        num_processes=results.get("num_processes"),
        tokens_per_step=results.get("tokens_per_step"),
        bleu=results.get("test_bleu"),
        signature=results.get("test_bleu_signature"),
        bleu_compound_split=results.get("test_bleu_compound_split"),
        bleu_compound_split_recipe=results.get("test_bleu_compound_split_recipe"),
        chrf=results.get("test_chrf"),
        exact_match=results.get("test_exact_match"),
        recipe={
            "preset": config.preset,
            "tokens per micro-batch and process": results.get(
                "tokens_per_micro_batch", config.optimization.max_tokens
            ),
            "warmup steps": config.optimization.warmup_steps,
            "learning-rate scale": config.optimization.lr_scale,
            "label smoothing": config.optimization.label_smoothing,
            "checkpoints averaged": len(results["averaged_checkpoints"]),
            "beam size": config.decoding.num_beams,
            "length penalty (GNMT alpha)": config.decoding.length_penalty,
        },
        notes=notes,
    )


def average_run(run_dir: str | Path, last: int | None = None, output_dir: str | Path | None = None) -> Path:
    """Average the last checkpoints of a training run and export them as a Hugging Face model directory.

    Args:
        run_dir: The run's directory (its ``output_dir``).
        last: How many of its checkpoints to average (default: the run's ``average_checkpoints``).
        output_dir: Where to write the model (default: ``<run_dir>/average-<last>``).

    Returns:
        The model directory.
    """
    layout = RunLayout(run_dir)
    saved = layout.settings
    if not saved.is_file():
        raise FileNotFoundError(f"{layout.root} is not a training run: it has no {saved.name}")
    config = load_saved_config(saved)
    check_run_dir_links(layout.root, layout.outputs(config.data, saved))  # nothing read through a link out of it
    last = config.checkpointing.average_checkpoints if last is None else last
    if last < 1:
        raise ValueError(f"last must be at least 1, got last={last}")
    checkpoints = list_checkpoints(layout.checkpoints)[-last:]
    if not checkpoints:
        raise FileNotFoundError(f"{layout.checkpoints} holds no checkpoint")
    if len(checkpoints) < last:
        warnings.warn(f"{layout.checkpoints} holds only {len(checkpoints)} checkpoints; averaging those", stacklevel=2)
    model = VanillaTransformerForConditionalGeneration(build_model_config(config.model))
    load_weights(model, average_checkpoints(checkpoints))
    tokenizer = AutoTokenizer.from_pretrained(layout.tokenizer, trust_remote_code=False)
    directory = Path(output_dir or layout.average(len(checkpoints)))
    return export_model(model, tokenizer, directory, config.decoding, config.data.max_length)
