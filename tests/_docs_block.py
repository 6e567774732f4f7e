"""A generated block of a docs page: the text between its two markers, which a test compares with its generator."""

from __future__ import annotations

from pathlib import Path


def shown_block(page: Path, start: str, end: str) -> str:
    """The stripped text between ``start`` and ``end`` in ``page``; an ``AssertionError`` naming a missing marker."""
    text = page.read_text()
    assert start in text and end in text, f"{page} lacks the markers {start} / {end}"
    return text.split(start, 1)[1].split(end, 1)[0].strip()
