"""A saved model folder's tokenizer loads without transformers' question whether to run the folder's code (issue 56,
cause 7c), in the ways the documentation gives.

transformers' ``AutoTokenizer.from_pretrained`` reads the folder's config.json first, with ``trust_remote_code=None``;
that file names the model's code (``auto_map``, which the Hub's remote code needs), and its model type is unknown to
transformers until ``vanilla_transformer`` is imported, so transformers asks ``[y/N]`` on standard input. Nothing in
the folder can avoid it without dropping the remote code; the documented ways do (docs/reliability.md): import the
package first, or ``AutoTokenizer.from_pretrained(path, trust_remote_code=False)``, or transformers' own
``PreTrainedTokenizerFast.from_pretrained(path)``. The plain call without the package is the control: it shows that
the question, when asked, is seen here.
"""

import re
from pathlib import Path

from without_package import PREAMBLE, result_of, run_offline

from vanilla_transformer.model_dir import load_tokenizer

SENTENCES = ["three hundred and twenty-one", "Seventy-one thousand, four hundred and fifty-six"]
QUESTION = "[y/N]"
MARK = "@@ way "
ROOT = Path(__file__).resolve().parents[2]


def loading_script(ways: dict[str, str], folder) -> str:
    """Load the tokenizer of `folder` each way of `ways` (name: expression of ``path``), each after a mark written to
    both standard output and standard error; print the ids each gives for `SENTENCES`."""
    lines = [
        "import json, sys",
        "from transformers import AutoTokenizer, PreTrainedTokenizerFast",
        f"path = {str(folder)!r}",
        "ids = {}",
    ]
    for name, expression in ways.items():
        lines += [
            f"print({MARK + name!r}, flush=True)",
            f"print({MARK + name!r}, file=sys.stderr, flush=True)",
            f"ids[{name!r}] = {expression}({SENTENCES!r}).input_ids",
            "sys.stdout.flush()",
            "sys.stderr.flush()",
        ]
    lines.append('print("\\nRESULT " + json.dumps(ids))')
    return "\n".join(lines) + "\n"


def by_way(output: str) -> dict[str, str]:
    """What a stream held after each way's mark, by way."""
    return {part.split("\n", 1)[0]: part.split("\n", 1)[-1] for part in output.split(MARK)[1:]}


def test_the_documented_ways_load_the_tokenizer_without_the_package_and_without_a_question(tiny_model_dir, tmp_path):
    expected = load_tokenizer(tiny_model_dir)(SENTENCES).input_ids
    ways = {
        "trust_remote_code=False": "AutoTokenizer.from_pretrained(path, trust_remote_code=False)",
        "PreTrainedTokenizerFast": "PreTrainedTokenizerFast.from_pretrained(path)",
        "plain": "AutoTokenizer.from_pretrained(path)",  # the control: here transformers asks
    }
    completed = run_offline(PREAMBLE + loading_script(ways, tiny_model_dir), tmp_path)
    out, err = by_way(completed.stdout), by_way(completed.stderr)
    assert result_of(completed) == dict.fromkeys(ways, expected)
    for way in ("trust_remote_code=False", "PreTrainedTokenizerFast"):
        assert QUESTION not in out[way] + err[way], (way, out[way], err[way])
    assert QUESTION in out["plain"] + err["plain"], "the question went unseen: this test cannot see it"


def test_the_plain_call_asks_nothing_once_the_package_is_imported(tiny_model_dir, tmp_path):
    script = "import vanilla_transformer\n" + loading_script(
        {"plain": "AutoTokenizer.from_pretrained(path)"}, tiny_model_dir
    )
    completed = run_offline(script, tmp_path)
    assert QUESTION not in completed.stdout + completed.stderr
    assert result_of(completed) == {"plain": load_tokenizer(tiny_model_dir)(SENTENCES).input_ids}


PYTHON_BLOCK = re.compile(r"```python\n(.*?)```", re.DOTALL)
AUTO_TOKENIZER_CALL = re.compile(r"AutoTokenizer\.from_pretrained\(([^()]*)\)")


def test_every_tokenizer_the_documentation_loads_with_auto_tokenizer_is_loaded_a_documented_way():
    """Where a page's Python loads a tokenizer with AutoTokenizer, it passes trust_remote_code (False: no question;
    True: the model's code, which the model needs anyway) or imports the package first: never the question."""
    pages = [ROOT / "README.md", ROOT / "model_card.md", *sorted((ROOT / "docs").glob("*.md"))]
    calls = 0
    for page in pages:
        for block in PYTHON_BLOCK.findall(page.read_text(encoding="utf-8")):
            for call in AUTO_TOKENIZER_CALL.finditer(block):
                calls += 1
                before = block[: call.start()]
                documented = "trust_remote_code=" in call[1] or re.search(r"^import vanilla_transformer", before, re.M)
                assert documented, f"{page.name}: {call[0]} may ask whether to run the model's code"
    assert calls >= 4
