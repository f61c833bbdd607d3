"""scripts/time_examples.py: the README's examples are timed as the README writes them, and the sentence says what
the record holds."""

import json
import re
from pathlib import Path

import time_examples

ROOT = Path(__file__).resolve().parents[1]


def _commands(markdown: str) -> list[str]:
    """The shell commands of a page's bash blocks, continuation lines joined and comments dropped."""
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", markdown, re.DOTALL):
        for command in block.replace("\\\n", " ").splitlines():
            command = " ".join(command.split("#", 1)[0].split())
            if command:
                commands.append(command)
    return commands


def test_each_timed_example_is_a_command_of_the_readme_word_for_word():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    commands = _commands(readme)
    assert any(command.endswith(time_examples.EXAMPLES["train"]) for command in commands)  # after the install
    assert time_examples.EXAMPLES["finetune"] in commands
    assert "--max-steps 300" in time_examples.EXAMPLES["finetune"]  # a broken copy the check must catch:
    assert time_examples.EXAMPLES["finetune"].replace("300", "30") not in commands


def test_the_summary_keeps_the_recorded_fields_only(tmp_path):
    assert time_examples.summary_figures(tmp_path / "absent.json") == {}
    path = tmp_path / "training_summary.json"
    path.write_text(json.dumps({"steps": 300, "exact_match": 91.5, "recipe": {"lr": 1}, "chrf": 97.0}))
    assert time_examples.summary_figures(path) == {"steps": 300, "exact_match": 91.5, "chrf": 97.0}


def _record(tmp_path, finetune_status=0):
    runs = [
        {"name": "train", "command": "vanilla-transformer train", "exit_status": 0, "wall_seconds": 205.4},
        {"name": "finetune", "command": "vanilla-transformer finetune m --numbers 3000", "exit_status": finetune_status, "wall_seconds": 361.0,
         "summary": {"exact_match": 91.53}},
    ]  # fmt: skip
    record = {"runs": runs, "load_average_start": [1.04, 1, 1], "load_average_end": [2.0, 1, 1],
              "processor": "Some CPU", "machine": "x86_64, 2 logical CPUs, Linux"}  # fmt: skip
    (tmp_path / "readme_examples.json").write_text(json.dumps(record))
    return tmp_path


def test_the_sentence_gives_both_times_the_score_the_machine_and_the_load(tmp_path):
    text = time_examples.finetune_example_time(_record(tmp_path))
    assert (
        "took 6 min 1 s, exact match 91.5% on its 300 held-out pairs" in text
        and "after 3 min 25 s for `vanilla-transformer train`" in text
    )
    assert "Some CPU (x86_64, 2 logical CPUs, Linux), 1-minute load 1.0 before and 2.0 after" in text
    assert "(docs/results/readme_examples.json)" in text
    assert "(results/readme_examples.json)" in time_examples.finetune_example_time_in_docs(tmp_path)


def test_a_failed_example_is_said_to_have_failed(tmp_path):
    text = time_examples.finetune_example_time(_record(tmp_path, finetune_status=1))
    assert "failed" in text and "took" not in text
    record = json.loads((tmp_path / "readme_examples.json").read_text())
    record["runs"] = [{**record["runs"][0], "exit_status": 2}]  # the default job failed: no fine-tuning ran
    (tmp_path / "readme_examples.json").write_text(json.dumps(record))
    text = time_examples.finetune_example_time(tmp_path)
    assert "failed when timed (`vanilla-transformer train` exited 2)" in text


def test_an_example_is_timed_with_its_exit_status_and_its_summary_is_found_by_its_output_dir(tmp_path):
    import sys

    completed, timed = time_examples.run_timed([sys.executable, "-c", "import sys; sys.exit(3)"], tmp_path)
    assert completed.returncode == timed["exit_status"] == 3 and timed["wall_seconds"] >= 0
    command = time_examples.EXAMPLES["finetune"]
    assert time_examples.option_value(command, "--output-dir") == "runs/finetuned"
    assert time_examples.option_value(command, "--numbers") == "2000"
