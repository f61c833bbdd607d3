"""Text in, the same way everywhere (issue 25, item 5): files, pipes and standard input through one reader, so a
byte-order mark, CRLF line ends, a stray carriage return and invalid UTF-8 give the same lines, or the same error
naming the file (or ``<stdin>``) and the line; and an output that cannot be written is refused before any work."""

import pytest

from vanilla_transformer import data, model_dir
from vanilla_transformer.cli.decoding import read_input_lines
from vanilla_transformer.data import iter_parallel_text, read_lines, read_parallel_text, read_tsv
from vanilla_transformer.serving import search

# The same three lines, as a Unix file, a Windows file with a BOM, and with a carriage return inside a line.
UNIX = b"one\ntwo three\nfour\n"
WINDOWS = b"\xef\xbb\xbfone\r\ntwo three\r\nfour\r\n"
STRAY_CR = b"one\ntwo\rthree\nfour"  # a carriage return is whitespace inside a sentence, not a line break
EXPECTED = ["one", "two three", "four"]


@pytest.mark.parametrize("text", [UNIX, WINDOWS, STRAY_CR], ids=["unix", "windows-bom", "stray-cr"])
def test_every_reader_gives_the_same_lines(text, tmp_path, monkeypatch):
    import io
    import sys

    path = tmp_path / "lines.txt"
    path.write_bytes(text)
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(text), encoding="utf-8"))
    assert read_input_lines("-", "--input") == EXPECTED  # standard input
    assert read_input_lines(path, "--input") == EXPECTED  # a file given to translate or evaluate
    assert read_lines(path) == EXPECTED  # corpora, finetune files
    assert list(data.iter_lines(path)) == EXPECTED  # train-tokenizer's files, streamed
    assert read_parallel_text(path, path) == list(zip(EXPECTED, EXPECTED, strict=True))
    assert [pair for chunk in iter_parallel_text(path, path) for pair in chunk] == list(
        zip(EXPECTED, EXPECTED, strict=True)
    )


def test_a_crlf_tsv_has_no_carriage_return_in_its_last_column(tmp_path):
    path = tmp_path / "pairs.tsv"
    path.write_bytes(b"en\tde\r\none\teins\r\n")
    assert read_tsv(path, "en", "de") == [("one", "eins")]


def test_train_tokenizer_reads_files_with_the_same_reader(tmp_path):
    from vanilla_transformer.tokenization import train_tokenizer

    path = tmp_path / "corpus.txt"
    path.write_bytes(b"alpha beta\r\n" * 20)
    tokenizer = train_tokenizer([path], vocab_size=300, min_frequency=1)
    # Byte-level BPE writes "\r" as the byte character "č" (in its alphabet of all 256 bytes): a CRLF file must not
    # teach it merges such as "betač".
    merged = [token for token in tokenizer.get_vocab() if len(token) > 1]
    assert "beta" in merged or "Ġbeta" in merged
    assert not any("č" in token for token in merged)


def test_bad_utf8_names_the_file_or_stdin_and_the_line_everywhere(tmp_path, monkeypatch):
    import io
    import sys

    text = b"fine\nalso fine\nbad \xff byte\n"
    path = tmp_path / "bad.txt"
    path.write_bytes(text)
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(text), encoding="utf-8"))
    with pytest.raises(ValueError, match=r"<stdin>:3: not UTF-8"):
        read_input_lines("-", "--input")
    for read in (read_lines, lambda p: list(data.iter_lines(p)), lambda p: read_parallel_text(p, p)):
        with pytest.raises(ValueError, match=rf"{path}:3: not UTF-8"):
            read(path)
    with pytest.raises(ValueError, match=rf"{path}:3: not UTF-8"):
        from vanilla_transformer.tokenization import train_tokenizer

        train_tokenizer([path], vocab_size=300, min_frequency=1)


def test_bad_utf8_on_stdin_stops_translate_before_the_model_loads(run_cli, tiny_model_dir, monkeypatch):
    loads = []
    monkeypatch.setattr(model_dir, "load_model_dir", lambda *args, **kwargs: loads.append(args))
    status, out, err = run_cli("translate", "--model", tiny_model_dir, stdin=b"one\n\xfe\n")
    assert status == 1 and "<stdin>:2: not UTF-8" in err and "Traceback" not in err
    assert out == "" and loads == []


def test_translate_gives_the_model_the_same_sentences_from_stdin_and_a_file_whatever_the_line_ends(
    run_cli, tiny_model_dir, tmp_path, monkeypatch
):
    seen = []
    translate = search.translate_stream  # what the command's translations come from, as they are made
    monkeypatch.setattr(
        search,
        "translate_stream",
        lambda model, tokenizer, sentences, **kw: (
            seen.append(list(sentences)) or translate(model, tokenizer, sentences, **kw)
        ),
    )
    sentences = "three hundred and five\nforty-two\n"
    unix = tmp_path / "unix.txt"
    unix.write_text(sentences, encoding="utf-8")
    status, expected, _ = run_cli("translate", "--model", tiny_model_dir, "--input", unix, "--num-beams", 1)
    assert status == 0 and len(expected.splitlines()) == 2
    windows = b"\xef\xbb\xbf" + sentences.replace("\n", "\r\n").encode()
    status, from_stdin, _ = run_cli("translate", "--model", tiny_model_dir, "--num-beams", 1, stdin=windows)
    assert status == 0 and from_stdin == expected
    assert seen == [["three hundred and five", "forty-two"]] * 2  # no BOM, no "\r" reaches the model


def test_evaluate_scores_crlf_references_like_unix_ones(run_cli, tmp_path):
    hypotheses, references = tmp_path / "hyp.txt", tmp_path / "ref.txt"
    hypotheses.write_bytes(b"eins\nzwei drei\n")
    references.write_bytes(b"\xef\xbb\xbfeins\r\nzwei drei\r\n")
    status, out, err = run_cli("evaluate", "--hypotheses", hypotheses, "--reference", references)
    assert status == 0, err
    assert "exact match = 100.00%" in out
    # the same references piped on standard input
    status, out, err = run_cli(
        "evaluate", "--hypotheses", hypotheses, "--reference", "-", stdin=references.read_bytes()
    )
    assert status == 0 and "exact match = 100.00%" in out, err


@pytest.mark.parametrize(
    "command",
    [
        ["translate", "--output", "{missing}/out.txt"],
        ["translate", "--output", "{folder}"],
        ["evaluate", "--source", "{input}", "--reference", "{input}", "--output", "{missing}/hyp.txt"],
        ["evaluate", "--source", "{input}", "--reference", "{input}", "--results", "{missing}/scores.json"],
    ],
    ids=["translate-missing-folder", "translate-onto-a-folder", "evaluate-output", "evaluate-results"],
)
def test_an_output_that_cannot_be_written_is_refused_before_the_model_loads(
    command, run_cli, tiny_model_dir, tmp_path, monkeypatch
):
    loads = []
    monkeypatch.setattr(model_dir, "load_model_dir", lambda *args, **kwargs: loads.append(args))
    source = tmp_path / "in.txt"
    source.write_text("forty-two\n", encoding="utf-8")
    names = {"missing": tmp_path / "nodir", "folder": tmp_path, "input": source}
    argv = [part.format(**names) for part in command]
    if command[0] == "translate":
        argv += ["--input", str(source)]
    status, out, err = run_cli(*argv, "--model", tiny_model_dir)
    assert status == 1 and loads == [], err
    assert ("nodir" in err and "does not exist" in err) or (str(tmp_path) in err and "is a directory" in err)
