"""Upload a trained model directory to a Hugging Face Hub repository, with remote code and a model card.

Examples:
    vanilla-transformer push runs/base/model my-org/transformer-base-en-de
    vanilla-transformer push runs/base/model my-org/transformer-base-en-de --dry-run upload/   # write, do not upload
    vanilla-transformer push runs/lora my-org/transformer-lora --base-model my-org/transformer-base-en-de  # an adapter
    vanilla-transformer push runs/base/model my-org/transformer-base-en-de --space my-org/transformer-demo  # + a Space

The repository gets the model saved anew (config.json with auto_map, safetensors weights, the modeling,
configuration and pipeline code), the tokenizer, generation_config.json, training_summary.json and a README.md model
card built from the package's model_card.md template with the figures of the run's training_summary.json. Log in
first with `hf auth login`, or pass --token. --space also uploads a Gradio Space of the model's demo (the 'demo'
extra's app: app.py, requirements.txt, README.md); with --static, a static Space of the page of `export-onnx --web`
instead (sdk: static: the model's ONNX folder and the page that translates in the browser, no server; it needs
transformers.js's npm package, --transformers-js). With --dry-run DIR the Space's folder is written to DIR-space.

A LoRA adapter folder (finetune --lora) is uploaded as an adapter: adapter_config.json, adapter_model.safetensors,
the tokenizer, training_summary.json and an adapter model card whose metadata names the base model. The base must be
on the Hub: --base-model names its Hub id when the adapter records a local path (push the base model first).
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence
from pathlib import Path

from vanilla_transformer.atomic import check_output_dir
from vanilla_transformer.cli import configure_logging
from vanilla_transformer.parsing import CommandParser, summary

logger = logging.getLogger("push_to_hub")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = CommandParser(description=summary(__doc__))
    parser.add_argument(
        "model_dir", type=Path, help="trained model directory or LoRA adapter folder, with its tokenizer"
    )
    parser.add_argument("repo_id", help="Hub repository, org/name")
    parser.add_argument(
        "--template", type=Path, help="model card template, a Jinja file (default: the package's model_card.md)"
    )
    parser.add_argument("--private", action="store_true", help="create the repository private")
    parser.add_argument("--token", help="Hub token with write access (default: the saved login)")
    parser.add_argument(
        "--commit-message",
        help="message of the upload commit (default: 'Upload vanilla Transformer', or 'Upload LoRA adapter')",
    )
    parser.add_argument(
        "--dry-run",
        type=Path,
        metavar="DIR",
        help="write the folder that would be uploaded to DIR, and upload nothing",
    )
    parser.add_argument(
        "--base-model",
        metavar="HUB_ID",
        help="for a LoRA adapter folder: the Hub id of its base model, recorded in the upload instead of the local "
        "path the adapter names (default: the adapter's base_model_name_or_path, if it is a Hub id)",
    )
    parser.add_argument(
        "--space",
        metavar="SPACE_ID",
        help="also upload a Gradio Space, org/name, with the demo of the model (vanilla-transformer demo)",
    )
    parser.add_argument(
        "--static",
        action="store_true",
        help="with --space: a static Space (sdk: static) of the translation page of export-onnx --web, which runs "
        "the model in the visitor's browser, in place of the Gradio demo",
    )
    parser.add_argument(
        "--transformers-js",
        type=Path,
        metavar="DIR",
        help="with --static: the @huggingface/transformers npm package to copy the page's scripts from (default: "
        "$VANILLA_TRANSFORMER_TRANSFORMERS_JS or ./node_modules/@huggingface/transformers)",
    )
    args = parser.parse_args(argv)
    if args.static and args.space is None:
        parser.error("--static goes with --space")
    if args.transformers_js is not None and not args.static:
        parser.error("--transformers-js goes with --static")
    from vanilla_transformer.export.space import check_repo_id  # huggingface_hub: not for --help
    from vanilla_transformer.model_dir import is_adapter_dir  # torch: not for --help

    check_repo_id(args.repo_id)  # by the Hub's rules, before anything is read or written: ids go into cards and code
    for option in ("space", "base_model"):
        if getattr(args, option) is not None:
            check_repo_id(getattr(args, option), f"--{option.replace('_', '-')}")
    if args.space is not None and is_adapter_dir(args.model_dir):
        parser.error(f"--space is for model directories; {args.model_dir} is a LoRA adapter folder")
    if args.base_model is not None and not is_adapter_dir(args.model_dir):
        parser.error(f"--base-model is for a LoRA adapter folder; {args.model_dir} has no adapter_config.json")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    configure_logging()
    args = parse_args(argv)
    from vanilla_transformer.export.hub import prepare_upload_folder, push_to_hub
    from vanilla_transformer.model_dir import is_adapter_dir

    kind = "the adapter" if is_adapter_dir(args.model_dir) else "the model"
    if args.dry_run is not None:
        space_dir = args.dry_run.with_name(args.dry_run.name + "-space")
        check_output_dir(args.dry_run, "--dry-run")  # both folders before either is written
        if args.space is not None:
            check_output_dir(space_dir, "--dry-run's Space folder")
        folder = prepare_upload_folder(
            args.model_dir, args.dry_run, repo_id=args.repo_id, template=args.template, base_model=args.base_model
        )
        logger.info("dry run: wrote %s of %s", ", ".join(sorted(path.name for path in folder.iterdir())), kind)
        if args.space is not None:
            space = _write_space(space_dir, args)
            logger.info("dry run: wrote the Space folder %s", space)
        return 0
    url = push_to_hub(
        args.model_dir,
        args.repo_id,
        template=args.template,
        base_model=args.base_model,
        private=args.private,
        token=args.token,
        commit_message=args.commit_message,
    )
    logger.info("uploaded %s %s to %s", kind, args.model_dir, url)
    if args.space is not None:
        logger.info("uploaded the Space to %s", _push_space(args))
    return 0


def _write_space(folder: Path, args: argparse.Namespace) -> Path:
    from vanilla_transformer.demo.space import write_space
    from vanilla_transformer.export.static_space import write_static_space

    if args.static:
        return write_static_space(folder, args.model_dir, args.repo_id, transformers_js=args.transformers_js)
    return write_space(folder, args.repo_id)


def _push_space(args: argparse.Namespace) -> str:
    from vanilla_transformer.demo.space import push_space
    from vanilla_transformer.export.static_space import push_static_space

    if args.static:
        return push_static_space(
            args.space, args.model_dir, args.repo_id, transformers_js=args.transformers_js, token=args.token
        )
    return push_space(args.space, args.repo_id, token=args.token)


if __name__ == "__main__":
    raise SystemExit(main())
