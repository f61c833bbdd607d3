"""Every Python block of the README, the model card and the docs pages runs as written: each in a fresh interpreter,
offline, in a folder where the names the block uses exist (tiny models saved at the paths the pages name, their
exports, the Hub repositories the pages name as local folders of the same name, the README's example files).

A block that cannot run here says so in the page, on the line before it, in an HTML comment (invisible on the site):

    <!-- docs-test: skip (REASON) -->                         not run; the test reports REASON
    <!-- docs-test: replace "OLD" with "NEW" (REASON) -->     run with OLD replaced by NEW (a long run made short)

A marker without a reason, or not followed by a Python block, fails the test, as does a replace marker whose OLD is
not in its block. The model card and the adapter card are Jinja templates: their blocks are taken from the cards as
`push` renders them."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from readme_examples import examples

ROOT = Path(__file__).resolve().parents[1]
ADAPTER_CARD = "ADAPTER_CARD"
"""The page name of the adapter's model card (`vanilla_transformer.export.hub.ADAPTER_CARD`, a template in code)."""
PAGES = (
    "README.md",
    "model_card.md",
    ADAPTER_CARD,
    *sorted(f"docs/{path.name}" for path in (ROOT / "docs").glob("*.md")),
)
CARD_REPO_ID = "my-org/transformer-en-de"
"""The Hub repository the model card is rendered for in this test, and that the pages' Hub examples name."""
ADAPTER_REPO_ID = "my-org/transformer-lora"
"""The Hub repository of the adapter card, whose base is `CARD_REPO_ID`, as the pages name it."""

FENCE = re.compile(r"^```python\n(?P<code>.*?)^```", re.DOTALL | re.MULTILINE)
MARKER = re.compile(r"<!--\s*docs-test:(?P<body>.*?)-->", re.DOTALL)
SKIP = re.compile(r"skip \((?P<reason>.*\S.*)\)")
REPLACE = re.compile(r'replace "(?P<old>[^"]+)" with "(?P<new>[^"]*)" \((?P<reason>.*\S.*)\)')
TIMEOUT = 300
"""Seconds a block may run (a fresh interpreter imports torch and transformers: seconds on a loaded 2-core CPU)."""


@dataclass(frozen=True)
class Block:
    page: str
    number: int  # counted from 1 on its page
    line: int
    code: str
    skip: str | None = None  # the reason
    replace: tuple[str, str] | None = None

    @property
    def name(self) -> str:
        return f"{self.page}:{self.number}"


def parse_marker(body: str, where: str) -> tuple[str | None, tuple[str, str] | None]:
    """(skip reason, (old, new)) of a marker's text; a ValueError naming `where` for anything else."""
    body = " ".join(body.split())
    if skip := SKIP.fullmatch(body):
        return skip["reason"], None
    if replace := REPLACE.fullmatch(body):
        return None, (replace["old"], replace["new"])
    raise ValueError(
        f'{where}: docs-test marker {body!r} is neither "skip (REASON)" nor "replace "OLD" with "NEW" (REASON)"; '
        "a marker needs its reason"
    )


def blocks_of(text: str, page: str) -> list[Block]:
    """The Python blocks of `text` with their markers; a ValueError for a marker that is malformed, that is not
    right before a Python block, or whose replacement is not in its block."""
    blocks = []
    markers = {match.end(): match for match in MARKER.finditer(text)}
    attached = set()
    for number, fence in enumerate(FENCE.finditer(text), start=1):
        line = text.count("\n", 0, fence.start()) + 1
        before = text[: fence.start()].rstrip(" \t\n")
        marker = markers.get(len(before))
        skip, replace = parse_marker(marker["body"], f"{page}:{line}") if marker else (None, None)
        if marker:
            attached.add(marker.end())
        if replace and replace[0] not in fence["code"]:
            raise ValueError(f"{page}:{line}: the block has no {replace[0]!r} to replace")
        blocks.append(Block(page, number, line, fence["code"], skip, replace))
    for end, marker in markers.items():
        if end not in attached:
            parse_marker(marker["body"], page)
            raise ValueError(f"{page}: docs-test marker {marker[0]!r} is not right before a Python block")
    return blocks


def page_text(page: str) -> str:
    """The page's text; for the cards, as ``push`` renders them for `CARD_REPO_ID` and `ADAPTER_REPO_ID` (a tiny
    random model, no figures)."""
    if page not in ("model_card.md", ADAPTER_CARD):
        return (ROOT / page).read_text(encoding="utf-8")
    from tiny_model import new_tiny_model

    from vanilla_transformer.export.hub import build_adapter_card, build_model_card
    from vanilla_transformer.training.lora import add_lora

    if page == ADAPTER_CARD:
        return str(build_adapter_card(add_lora(new_tiny_model()), {}, ADAPTER_REPO_ID, base_model=CARD_REPO_ID))
    return str(build_model_card(new_tiny_model(), {}, CARD_REPO_ID, ROOT / "model_card.md"))


def all_blocks() -> list[Block]:
    return [block for page in PAGES for block in blocks_of(page_text(page), page)]


BLOCKS = all_blocks()


# --------------------------------------------------------------------------- the folder the blocks run in


def _save_with_pipeline(source: Path, directory: Path) -> None:
    """A copy of the model directory `source` as a run's model directory is written: with the pipeline code."""
    from vanilla_transformer.model_dir import add_pipeline_support

    shutil.copytree(source, directory)
    add_pipeline_support(directory)


def _six_layer_model(tiny_model_dir: Path, directory: Path) -> None:
    """A random model of six layers, as the docs' Multi30k model has, with the tiny model's tokenizer, and positions
    enough for a search that never ends before its limit (input + 50 tokens)."""
    from tiny_model import new_tiny_model

    from vanilla_transformer.model_dir import load_model_dir, save_model_dir
    from vanilla_transformer.serving.search import paper_generation_config

    tokenizer = load_model_dir(tiny_model_dir)[1]
    model = new_tiny_model(vocab_size=len(tokenizer), encoder_layers=6, decoder_layers=6, max_position_embeddings=128)
    save_model_dir(model, tokenizer, directory, generation_config=paper_generation_config(model.config))


def _hub_repositories(root: Path) -> None:
    """The Hub repositories the pages name, as local folders of the same name (transformers and peft read a local
    folder before the Hub): the numbers model as ``push`` uploads it, its LoRA adapter naming it as its base, and
    the numbers model converted to MarianMT in place of OPUS-MT."""
    from vanilla_transformer.export.hub import prepare_upload_folder
    from vanilla_transformer.export.marian import export_marian
    from vanilla_transformer.model_dir import load_model_dir, save_adapter_dir
    from vanilla_transformer.training.lora import add_lora

    numbers = root / "runs" / "numbers" / "model"
    prepare_upload_folder(numbers, root / CARD_REPO_ID, repo_id=CARD_REPO_ID)
    model, tokenizer = load_model_dir(numbers)
    save_adapter_dir(add_lora(model), tokenizer, root / ADAPTER_REPO_ID, base_model=CARD_REPO_ID)
    export_marian(numbers, root / "Helsinki-NLP" / "opus-mt-en-de")


@pytest.fixture(scope="session")
def docs_folder(tiny_model_dir, tmp_path_factory) -> Path:
    """What the pages' earlier steps leave: the run models they name, the exports of the bash lines before the
    serving blocks, the Hub repositories as local folders, and data/{train,dev}.{en,de} (the README's examples)."""
    from vanilla_transformer.cli import main as cli_main

    root = tmp_path_factory.mktemp("docs-folder")
    runs = root / "runs"
    _save_with_pipeline(tiny_model_dir, runs / "numbers" / "model")
    _save_with_pipeline(tiny_model_dir, runs / "base" / "model")
    _six_layer_model(tiny_model_dir, runs / "multi30k" / "model")
    numbers = str(runs / "numbers" / "model")
    assert cli_main(["export-ctranslate2", numbers, str(runs / "numbers" / "ct2"), "--quantization", "int8"]) == 0
    assert cli_main(["export-onnx", numbers, str(runs / "numbers" / "onnx")]) == 0
    _hub_repositories(root)
    for name, text in examples().items():
        if name.endswith((".en", ".de")):
            for split in ("train", "dev"):
                path = root / "data" / f"{split}{Path(name).suffix}"
                path.parent.mkdir(exist_ok=True)
                path.write_text(text, encoding="utf-8")
    return root


def run_block(code: str, folder: Path, home: Path) -> subprocess.CompletedProcess:
    """Run `code` as a script in a fresh interpreter in `folder`: offline, with this checkout's package first on
    the path, a Hugging Face home of its own, no standard input (a question on it fails), no display, one thread."""
    (folder / "block.py").write_text(code, encoding="utf-8")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        "HF_HOME": str(home),
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "MPLBACKEND": "Agg",
        "TOKENIZERS_PARALLELISM": "false",
        "OMP_NUM_THREADS": "1",  # tiny models run fastest on one thread (conftest.py), and the blocks share the CPU
    }
    return subprocess.run(
        [sys.executable, "block.py"],
        cwd=folder,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )


# --------------------------------------------------------------------------- tests


def test_every_page_with_python_is_read():
    """The pages' blocks are found: the README's three, the cards' one each, serving.md's five, ...; and no page has
    Python in a fence this test would not read (another name for the language, or indented in a list)."""
    unread = re.compile(r"^```(?:py|python3|pycon|ipython)\b|^[ \t]+```", re.MULTILINE)
    assert not [page for page in PAGES if unread.search(page_text(page))]
    counts = {page: sum(block.page == page for block in BLOCKS) for page in PAGES}
    assert counts["README.md"] == 3 and counts["docs/serving.md"] == 5, counts
    assert counts["model_card.md"] == counts[ADAPTER_CARD] == 1, counts
    cards = "".join(block.code for block in BLOCKS if block.page in ("model_card.md", ADAPTER_CARD))
    assert "{{" not in cards and f'"{CARD_REPO_ID}"' in cards and f'"{ADAPTER_REPO_ID}"' in cards


@pytest.mark.parametrize(
    "body",
    ["skip", "skip ()", "skip (  )", 'replace "a" with "b"', 'replace "a" with "b" ()', "run it (why)"],
)
def test_a_marker_without_its_reason_fails(body):
    text = f"<!-- docs-test: {body} -->\n```python\na = 1\n```\n"
    with pytest.raises(ValueError, match="needs its reason"):
        blocks_of(text, "page.md")


def test_a_marker_is_read_and_must_be_right_before_a_block():
    text = "<!-- docs-test: skip (needs a GPU) -->\n\n```python\nimport torch\n```\n"
    (block,) = blocks_of(text, "page.md")
    assert block.skip == "needs a GPU" and block.name == "page.md:1" and block.line == 3
    marked = '<!-- docs-test: replace "2000" with "2" (a long run) -->\n```python\nsteps = 2000\n```\n'
    assert blocks_of(marked, "page.md")[0].replace == ("2000", "2")
    with pytest.raises(ValueError, match="not right before a Python block"):
        blocks_of("<!-- docs-test: skip (needs a GPU) -->\nSome text.\n\n```python\na = 1\n```\n", "page.md")
    with pytest.raises(ValueError, match="has no '3000' to replace"):
        blocks_of(marked.replace('"2000"', '"3000"'), "page.md")


def test_a_block_that_fails_fails_the_run(tmp_path):
    """The runner reports what a block raises, such as a name it never defines (serving.md's `tokenizer` did)."""
    completed = run_block("print(tokenizer)\n", tmp_path, tmp_path / "hf-home")
    assert completed.returncode != 0 and "NameError: name 'tokenizer' is not defined" in completed.stderr


@pytest.mark.parametrize("block", BLOCKS, ids=[block.name for block in BLOCKS])
def test_the_python_block_runs_as_written(block, docs_folder, tmp_path):
    if block.skip:
        pytest.skip(f"{block.name} (line {block.line}): {block.skip}")
    code = block.code.replace(*block.replace) if block.replace else block.code
    folder = tmp_path / "work"
    shutil.copytree(docs_folder, folder, symlinks=True)
    completed = run_block(code, folder, tmp_path / "hf-home")
    assert completed.returncode == 0, (
        f"{block.name} (line {block.line}) failed:\n{code}\n{completed.stdout[-3000:]}\n{completed.stderr[-6000:]}"
    )
    shutil.rmtree(folder)  # a base model is 250 MB; pytest keeps the temporary folders of recent runs
