"""docs/results.md is shared by several benches: bench/jct.py writes the file, and bench/fidelity.py and
bench/elastic.py each own one section between their own markers (`<!-- name:begin ... -->` / `<!-- name:end -->`),
which bench/jct.py keeps when it rewrites the rest."""

from __future__ import annotations

from pathlib import Path

RESULTS = Path(__file__).resolve().parents[1] / "docs" / "results.md"


def replace_section(begin: str, end: str, lines: list[str], path: Path = RESULTS) -> None:
    """Replace the text from `begin` to `end` (the markers included; `lines` must start with `begin` and end with
    `end`) in `path`, or append it when the markers are absent."""
    text = path.read_text() if path.exists() else ""
    block = "\n".join(lines)
    if begin in text and end in text:
        text = text[: text.index(begin)] + block + text[text.index(end) + len(end):]
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    path.write_text(text)
