"""Reads are bounded (issue 38, cause 5): an input without line breaks (/dev/zero), a FIFO that never ends, or more
lines than memory allows are refused with one line naming the file and the limit, before they are read whole. Each
command runs in a real process whose address space is capped, so that the unbounded reader of old fails fast with a
MemoryError instead of filling the machine."""

import os
import threading

import pytest
from fault_support import run_capped


def _feed_forever(fifo, chunk):
    """Write `chunk` into the FIFO until its reader goes away."""
    try:
        with open(fifo, "wb") as stream:
            while True:
                stream.write(chunk)
    except (BrokenPipeError, OSError):
        pass


def _one_line_error(completed, *expected):
    err = completed.stderr.decode(errors="replace")
    assert completed.returncode == 1, err[-2000:]
    assert "Traceback" not in err and "MemoryError" not in err, err[-2000:]
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and all(text in lines[0] for text in expected), err[-2000:]


def test_evaluate_refuses_dev_zero_as_hypotheses(tmp_path):
    from vanilla_transformer.data import MAX_LINE_BYTES

    reference = tmp_path / "ref.txt"
    reference.write_text("eins\n")
    completed = run_capped("evaluate", "--hypotheses", "/dev/zero", "--reference", reference)
    _one_line_error(completed, "--hypotheses=/dev/zero:1", f"{MAX_LINE_BYTES:,} bytes")


@pytest.mark.parametrize("chunk", [b"x" * 65536, b"forty-two\n" * 6554], ids=["no-line-break", "endless-lines"])
def test_translate_refuses_a_fifo_that_never_ends(chunk, tiny_model_dir, tmp_path):
    from vanilla_transformer.data import MAX_LINE_BYTES

    fifo = tmp_path / "input.fifo"
    os.mkfifo(fifo)
    writer = threading.Thread(target=_feed_forever, args=(fifo, chunk), daemon=True)
    writer.start()
    limit = {"VANILLA_TRANSFORMER_MAX_INPUT_BYTES": str(64 << 20)}  # what a machine with 256 MiB free would allow
    completed = run_capped("translate", "--model", tiny_model_dir, "--input", fifo, env=limit)
    expected = f"{MAX_LINE_BYTES:,} bytes" if b"\n" not in chunk else f"{64 << 20:,} bytes"
    _one_line_error(completed, f"--input={fifo}", expected)
    writer.join(timeout=30)


def test_a_regular_file_over_the_limit_is_refused_before_it_is_read(tmp_path, monkeypatch):
    from vanilla_transformer.data import read_text_lines

    big = tmp_path / "big.txt"
    big.write_bytes(b"a line\n" * 1000)
    monkeypatch.setenv("VANILLA_TRANSFORMER_MAX_INPUT_BYTES", "4000")
    opened = []
    real_open = open
    monkeypatch.setattr("builtins.open", lambda *args, **kwargs: opened.append(args[0]) or real_open(*args, **kwargs))
    with pytest.raises(ValueError, match=r"big.txt holds more than 4,000 bytes"):
        read_text_lines(big, str(big))
    assert opened == []  # refused by its size, unread
    monkeypatch.setenv("VANILLA_TRANSFORMER_MAX_INPUT_BYTES", "100000")
    assert read_text_lines(big, str(big)) == ["a line"] * 1000


def test_training_readers_refuse_a_device_and_an_overlong_line(tmp_path):
    from vanilla_transformer.data import MAX_LINE_BYTES, iter_lines, read_lines

    with pytest.raises(ValueError, match="/dev/zero is not a regular file"):
        read_lines("/dev/zero")
    long = tmp_path / "long.txt"
    long.write_bytes(b"fine\n" + b"y" * (MAX_LINE_BYTES + 10) + b"\n")
    for read in (read_lines, lambda path: list(iter_lines(path))):
        with pytest.raises(ValueError, match=rf"long.txt:2: a line longer than {MAX_LINE_BYTES:,} bytes"):
            read(long)
