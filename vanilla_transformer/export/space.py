"""A Hugging Face Space, written and uploaded one way for both kinds the package makes: the Gradio demo
(`demo.space`) and the static page of ``export-onnx --web`` (`export.static_space`). Each writes its own files; this
module writes the Space's README (its metadata) and does the upload: a staging folder of its own, ``create_repo``
with the Space's SDK, ``upload_folder`` as one commit.

Ids and titles are the user's: a repository id is checked by the Hub's own rules (`check_repo_id`) before anything
is written, and the README's metadata is written by huggingface_hub's YAML dumper (`SpaceCardData`), never by
formatting text, so that no value can close a string or add a key.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path

from huggingface_hub import HfApi, SpaceCard, SpaceCardData
from huggingface_hub.utils import HFValidationError, validate_repo_id

SPACE_STYLE = {"emoji": "🔍", "colorFrom": "blue", "colorTo": "indigo", "pinned": False}
"""The look of the package's Spaces on the Hub, the same for both kinds."""

PACKAGE_LINK = "[vanilla-transformer](https://pypi.org/project/vanilla-transformer/)"


def check_repo_id(repo_id: str, what: str = "repo_id") -> str:
    """`repo_id` if it is a Hub repository id by the Hub's rules (``huggingface_hub.utils.validate_repo_id``: ``name``
    or ``namespace/name``, letters, digits, ``-``, ``_`` and ``.``, no ``--`` or ``..``); else a ValueError naming
    `what` (an option, such as ``--space``) and the Hub's reason."""
    try:
        validate_repo_id(repo_id)
    except HFValidationError as error:
        reason = str(error).splitlines()[0].rstrip(".")
        raise ValueError(f"{what}={repo_id!r} is not a Hub repository id ({reason}); give namespace/name") from None
    return repo_id


def write_space_readme(
    folder: str | os.PathLike[str], *, sdk: str, title: str, body: str, models: list[str] | None = None, **metadata
) -> Path:
    """Write the Space's ``README.md`` in `folder`: the metadata (`sdk`, `title`, `models`, the package's look and any
    other `metadata`, such as ``app_file``) as YAML by huggingface_hub's `SpaceCardData`, then ``# title`` and `body`
    (Markdown)."""
    data = SpaceCardData(title=title, sdk=sdk, license="apache-2.0", models=models or None, **metadata, **SPACE_STYLE)
    heading = " ".join(title.split())
    card = SpaceCard(f"---\n{data.to_yaml()}\n---\n\n# {heading}\n\n{body.strip()}\n")
    path = Path(folder) / "README.md"
    card.save(path)
    return path


def upload_space(
    space_id: str,
    sdk: str,
    write: Callable[[Path], Path],
    *,
    private: bool = False,
    token: str | None = None,
    commit_message: str,
) -> str:
    """Upload a Space: `write` fills a folder (given its path, returns the folder written) in a temporary staging
    folder, the Space `space_id` (checked first, `check_repo_id`) is created with `sdk` (``gradio``, ``static``) where
    it does not exist, and the folder uploaded as one commit; the commit's URL. The staging folder is this function's
    own and is removed."""
    check_repo_id(space_id, "space_id")
    api = HfApi(token=token)
    with tempfile.TemporaryDirectory() as staging:
        folder = write(Path(staging) / "space")
        api.create_repo(space_id, repo_type="space", space_sdk=sdk, private=private, exist_ok=True)
        commit = api.upload_folder(
            repo_id=space_id, repo_type="space", folder_path=folder, commit_message=commit_message
        )
    return commit.commit_url


__all__ = ["PACKAGE_LINK", "SPACE_STYLE", "check_repo_id", "upload_space", "write_space_readme"]
