"""Upload a trained model directory to a Hugging Face Hub repository, with remote code and a model card.

Examples:
    vanilla-transformer push runs/base/model my-org/transformer-base-en-de
    vanilla-transformer push runs/base/model my-org/transformer-base-en-de --dry-run upload/   # write, do not upload

The repository gets the model saved anew (config.json with auto_map, safetensors weights, the modeling,
configuration and pipeline code), the tokenizer, generation_config.json, training_summary.json and a README.md model
card built from the package's model_card.md template with the figures of the run's training_summary.json. Log in
first with `hf auth login`, or pass --token.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence
from pathlib import Path

from vanilla_transformer.cli import configure_logging
from vanilla_transformer.export.hub import prepare_upload_folder, push_to_hub

logger = logging.getLogger("push_to_hub")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model_dir", type=Path, help="trained model directory, with its tokenizer")
    parser.add_argument("repo_id", help="Hub repository, org/name")
    parser.add_argument(
        "--template", type=Path, help="model card template, a Jinja file (default: the package's model_card.md)"
    )
    parser.add_argument("--private", action="store_true", help="create the repository private")
    parser.add_argument("--token", help="Hub token with write access (default: the saved login)")
    parser.add_argument("--commit-message", default="Upload vanilla Transformer", help="message of the upload commit")
    parser.add_argument(
        "--dry-run",
        type=Path,
        metavar="DIR",
        help="write the folder that would be uploaded to DIR, and upload nothing",
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    configure_logging()
    args = parse_args(argv)
    if args.dry_run is not None:
        folder = prepare_upload_folder(args.model_dir, args.dry_run, repo_id=args.repo_id, template=args.template)
        logger.info("dry run: wrote %s", ", ".join(sorted(path.name for path in folder.iterdir())))
        return 0
    url = push_to_hub(
        args.model_dir,
        args.repo_id,
        template=args.template,
        private=args.private,
        token=args.token,
        commit_message=args.commit_message,
    )
    logger.info("uploaded %s to %s", args.model_dir, url)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
