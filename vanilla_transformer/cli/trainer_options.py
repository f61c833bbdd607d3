"""The option names of transformers' `Seq2SeqTrainingArguments`, read from transformers' source without importing it.

``finetune`` passes every Trainer option through, so a mistyped option is one that neither finetune nor the Trainer
knows. transformers takes seconds to import; the names are read from the two files that define the Trainer's options
instead (as ``HfArgumentParser`` makes them: ``--name``, ``--name-with-dashes``, ``--no_name`` and ``--no-name`` for a
flag, and the aliases of a field's metadata). The set is a superset: a name in it is checked again, exactly, by
transformers' own parser once it loads; only an option outside it is refused before. Should a transformers release
define its options in another way (another base class, another file), `trainer_option_names` returns None and the
option is checked after transformers loads, as before: slower, never wrong.
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

TRAINER_SOURCES = {
    "training_args.py": ("TrainingArguments", ()),
    "training_args_seq2seq.py": ("Seq2SeqTrainingArguments", ("TrainingArguments",)),
}
"""transformers' files that define the Trainer's options: the class each defines, and that class's base classes."""


def _may_default_to_true(value: ast.expr | None) -> bool:
    """Whether a field assigned `value` may default to True (``HfArgumentParser`` adds ``--no_name`` for a flag that
    does): unless its default is written as another literal, or it has none (or a default_factory)."""
    if isinstance(value, ast.Call) and ast.unparse(value.func) in ("field", "dataclasses.field"):
        value = next((keyword.value for keyword in value.keywords if keyword.arg == "default"), None)
    if value is None:
        return False
    try:
        return ast.literal_eval(value) is True
    except (ValueError, TypeError):  # a name or an expression: it may be True
        return True


def _class_names(source: str, name: str, bases: tuple[str, ...]) -> set[str] | None:
    """The option strings of the dataclass `name` defined in `source`, if it has exactly the base classes `bases`."""
    for node in ast.parse(source).body:
        if not (isinstance(node, ast.ClassDef) and node.name == name):
            continue
        if tuple(ast.unparse(base) for base in node.bases) != bases:
            return None
        names: set[str] = set()
        for statement in node.body:
            if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name):
                field = statement.target.id
                dashes = field.replace("_", "-")
                names |= {f"--{field}", f"--{dashes}"}
                if _may_default_to_true(statement.value):
                    names |= {f"--no_{field}", f"--no-{dashes}"}
                names |= {
                    value.value
                    for value in ast.walk(statement)
                    if isinstance(value, ast.Constant) and isinstance(value.value, str) and value.value.startswith("-")
                }  # the aliases of the field's metadata, and any other string that looks like an option
        return names
    return None


def trainer_option_names() -> frozenset[str] | None:
    """Every option string that transformers' parser of `Seq2SeqTrainingArguments` may accept (a superset), or None
    where transformers is not installed or its source is not laid out as this function reads it."""
    spec = importlib.util.find_spec("transformers")  # finds the package without importing it
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(next(iter(spec.submodule_search_locations)))
    names: set[str] = set()
    for file, (name, bases) in TRAINER_SOURCES.items():
        try:
            found = _class_names((folder / file).read_text(encoding="utf-8"), name, bases)
        except (OSError, SyntaxError, UnicodeDecodeError):
            return None
        if not found:
            return None
        names |= found
    return frozenset(names)
