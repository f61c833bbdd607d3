"""Lines and bytes of text files, the figures a corpus's disk size scales by, written to a results file.

    python scripts/measure_lines.py ../shared/data/wmt14_en_de/newstest2014.{en,de} \
        --output docs/results/newstest2014_lines.json

The data benchmark's synthetic corpus (`benchmark_data.py`) repeats Multi30k's short captions; its disk figures at
WMT14's pair count are projected to WMT14's sentence lengths from these (`benchmark_data.wmt14_data_sizes`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bench.record import Record


def line_bytes(path: Path) -> dict[str, int]:
    """The lines (newlines) and bytes of the file at `path`, read in blocks."""
    lines = size = 0
    with open(path, "rb") as handle:
        while block := handle.read(1 << 20):
            lines += block.count(b"\n")
            size += len(block)
    return {"lines": lines, "bytes": size}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="+", type=Path, help="the text files")
    parser.add_argument("--output", type=Path, help="the results file")
    args = parser.parse_args(argv)
    for path in args.files:
        if not path.is_file():
            parser.error(f"{path}: not a file")
    record = Record(__file__, argv, timed=False)
    files = {path.name: line_bytes(path) for path in args.files}
    lines, size = sum(f["lines"] for f in files.values()), sum(f["bytes"] for f in files.values())
    print(f"{lines:,} lines, {size:,} bytes: {size / max(lines, 1):.1f} bytes a line")
    record.write({"files": files, "bytes_per_line": round(size / max(lines, 1), 1)}, args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
