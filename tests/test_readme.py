"""The README cannot drift from the code: its file examples are what the data readers read, every command it shows
parses with that command's own options, its links lead to files, and the documentation site builds strictly."""

import importlib
import importlib.util
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from readme_examples import README, examples

from vanilla_transformer.cli import COMMANDS

ROOT = Path(__file__).resolve().parents[1]
BASH = re.compile(r"```bash\n(.*?)```", re.DOTALL)


def shell_commands(text: str) -> list[list[str]]:
    """Every command line of the bash blocks in `text`, continuation lines joined, comments dropped, and shell
    redirections and process substitutions (``< file``, ``<(head file)``) replaced by a file name."""
    commands = []
    for block in BASH.findall(text):
        for line in block.replace("\\\n", " ").splitlines():
            line = re.sub(r"\s<\s*\S+", "", re.sub(r"<\([^)]*\)", "FILE", line))
            for part in re.split(r"&&|\|", line):
                words = shlex.split(part, comments=True)
                if words:
                    commands.append(words)
    return commands


def package_commands(text: str = README) -> list[tuple[str, list[str]]]:
    """(command, its arguments) for each ``vanilla-transformer CMD`` and ``accelerate launch -m vanilla_transformer
    CMD`` in `text`."""
    found = []
    for words in shell_commands(text):
        if words[0] == "vanilla-transformer":
            found.append((words[1], words[2:]))
        elif words[:2] == ["accelerate", "launch"] or words[1:3] == ["accelerate", "launch"]:
            module = words.index("-m")
            assert words[module + 1] == "vanilla_transformer", words
            found.append((words[module + 2], words[module + 3 :]))
    return found


OUTPUT_OPTIONS = ("--output", "--results")
"""Files a command writes; their parser refuses a folder that does not exist (the pages' earlier commands, such as
train's --output-dir, create them)."""


def parse(command: str, arguments: list[str]) -> object:
    """Parse `arguments` with the command's own parser (argparse exits on an unknown option), in a working directory
    where the folders of the files it writes exist, as the commands before it on the page leave them."""
    for option, value in zip(arguments, arguments[1:], strict=False):
        if option in OUTPUT_OPTIONS and command in ("translate", "evaluate"):
            Path(value).parent.mkdir(parents=True, exist_ok=True)
    module_name, _, function = COMMANDS[command][0].partition(":")
    module = importlib.import_module(f"vanilla_transformer.cli.{module_name}")
    assert not function, f"{command}: no parser to check against"
    for _ in range(len(arguments) + 1):
        try:
            return module.parse_args(arguments)
        except FileNotFoundError as error:  # an input the page's earlier steps make: the parser checks it exists
            named = re.fullmatch(r"(\S+?)=(.+): no such file", str(error))
            assert named, error
            Path(named[2]).parent.mkdir(parents=True, exist_ok=True)
            Path(named[2]).write_text("a line\n", encoding="utf-8")
    raise AssertionError(f"{command} {arguments}: the inputs never sufficed")


def test_the_readme_is_short():
    assert len(README.splitlines()) <= 210


def test_the_readme_shows_each_format_with_three_lines():
    found = examples()
    assert set(found) == {"mydata/train.en", "mydata/train.de", "mydata/train.tsv", "mydata/train.jsonl"}
    assert all(len(text.splitlines()) == 3 for text in found.values())


def test_every_command_the_readme_shows_parses_with_its_options(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # train's parser looks for a run to resume in the output directory
    commands = package_commands()
    assert {command for command, _ in commands} >= {"train", "translate", "evaluate", "finetune"}
    for command, arguments in commands:
        parse(command, arguments)


@pytest.mark.parametrize("page", sorted(path.name for path in (ROOT / "docs").glob("*.md")))
def test_every_command_a_docs_page_shows_parses_with_its_options(page, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs" / "lora").mkdir(parents=True)  # push --base-model checks that the folder is an adapter
    (tmp_path / "runs" / "lora" / "adapter_config.json").write_text("{}", encoding="utf-8")
    for command, arguments in package_commands((ROOT / "docs" / page).read_text(encoding="utf-8")):
        if ":" not in COMMANDS[command][0]:  # import-marian and export-marian share a module without parse_args
            parse(command, arguments)


def test_a_readme_option_that_does_not_exist_would_fail(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit):
        parse("translate", ["--model", "runs/numbers/model", "--inputs", "test.en"])


def test_the_own_files_example_is_what_the_readers_read(tmp_path, monkeypatch):
    """The README's train command, run on its example files, reads the same three pairs from each format: the pairs
    of the aligned plain-text example, line by line."""
    from vanilla_transformer.training import load_splits

    monkeypatch.chdir(tmp_path)
    for path, text in examples().items():
        folder, name = path.split("/")
        for split in ("train", "valid", "test"):  # the README shows the train file; the others are alike
            target = tmp_path / folder / name.replace("train", split, 1)
            target.parent.mkdir(exist_ok=True)
            target.write_text(text, encoding="utf-8")
    trains = [
        arguments for command, arguments in package_commands() if command == "train" and "--dataset" in arguments
    ]
    assert len(trains) == 1, trains
    config = parse("train", trains[0])
    found = examples()
    expected = list(zip(found["mydata/train.en"].splitlines(), found["mydata/train.de"].splitlines(), strict=True))
    assert len(expected) == 3 and config.data.dataset in ("text", "tsv", "jsonl")
    for kind in ("text", "tsv", "jsonl"):
        splits = load_splits(config.replace(dataset=kind))
        assert [list(pairs) for pairs in (splits.train, splits.valid, splits.test)] == [expected] * 3, kind


def test_the_own_files_round_trip_reads_what_the_run_writes(tmp_path, monkeypatch):
    """translate reads the run's test.<src> with its model and evaluate scores against its test.<tgt>: the files
    ``train`` writes in its --output-dir (training.evaluation writes test.<src_lang> and test.<tgt_lang>)."""
    monkeypatch.chdir(tmp_path)
    commands = package_commands()
    config = parse("train", next(arguments for command, arguments in commands if "--dataset" in arguments))
    run = Path(config.checkpointing.output_dir)
    translate = parse(
        "translate",
        next(
            arguments for command, arguments in commands if command == "translate" and str(run) in " ".join(arguments)
        ),
    )
    evaluate = parse(
        "evaluate",
        next(
            arguments for command, arguments in commands if command == "evaluate" and str(run) in " ".join(arguments)
        ),
    )
    assert Path(translate.model) == run / "model" and Path(translate.input) == run / f"test.{config.data.src_lang}"
    assert Path(evaluate.hypotheses) == Path(translate.output)
    assert Path(evaluate.reference) == run / f"test.{config.data.tgt_lang}"


def test_a_bad_line_is_named_with_its_file_and_line(tmp_path):
    from vanilla_transformer.data.corpora import read_tsv

    path = tmp_path / "train.tsv"
    path.write_text(examples()["mydata/train.tsv"] + "no tab here\n", encoding="utf-8")
    with pytest.raises(ValueError, match=re.escape(f"{path}:4")):
        read_tsv(path)


def test_the_readme_test_command_is_the_one_ci_runs():
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    test_command = [line for line in BASH.findall(README)[0].splitlines() if "pytest" in line]
    assert len(test_command) == 1 and test_command[0].endswith("python -m pytest -q -n auto")  # the slow ones left out
    assert '`python -m pytest -q -n auto -m ""` runs every test' in README  # the README's second command, all of them
    assert 'python -m pytest -q -n auto -m "")' in ci  # .ci/run's tests(): every test in each environment


def test_the_readme_links_lead_to_files():
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", README)
    local = [link for link in links if not re.match(r"[a-z]+://", link)]
    assert local and all((ROOT / link).exists() for link in local), [
        link for link in local if not (ROOT / link).exists()
    ]


@pytest.mark.skipif(importlib.util.find_spec("mkdocs") is None, reason="mkdocs is not installed (the docs extra)")
def test_the_documentation_site_builds_strictly(tmp_path):
    """mkdocs.yml sets strict: a broken link or anchor, or a page missing from the nav, fails the build."""
    completed = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin"},
        timeout=300,
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr
    home = (tmp_path / "site" / "index.html").read_text(encoding="utf-8")
    assert "Train on your own files" in home and 'href="model/"' in home  # the README, its links rewritten


def test_json_examples_are_json():
    for line in examples()["mydata/train.jsonl"].splitlines():
        json.loads(line)


def test_the_install_lines_name_what_pip_can_install_and_every_extra():
    """No package index serves vanilla-transformer, so no page tells a user to ``pip install vanilla-transformer``
    by name; the install page lists every extra the package declares (issue 56: it left out [demo])."""
    import tomllib

    declared = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    commands = (ROOT / "docs" / "commands.md").read_text(encoding="utf-8")
    for extra in set(declared) - {"dev", "docs"}:
        assert f'pip install ".[{extra}]"' in commands, extra
    for page, text in (("README.md", README), ("docs/commands.md", commands)):
        by_name = re.search(
            r"^pip install [\"']?vanilla-transformer(?!.* @ )|`pip install vanilla-transformer`", text, re.M
        )
        assert by_name is None, (page, by_name)
