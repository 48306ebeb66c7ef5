"""Output truncation as Claude Code's MCP client does it, so one huge result cannot swamp a page or a record.

A cheap size estimate first; only near the limit a closer count; text cut at the limit; each
image counted as about 1,600 tokens; a notice that tells what happened and what to do instead.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

DEFAULT_MAX_OUTPUT_TOKENS = 25_000
THRESHOLD_FACTOR = 0.5  # below half the limit by the cheap estimate: no closer look needed
IMAGE_TOKEN_ESTIMATE = 1_600
CHARS_PER_TOKEN = 4
_TOKEN = re.compile(r"\w{1,8}|[^\w\s]|\s+")


def notice(max_tokens: int) -> str:
    return (
        f"[OUTPUT TRUNCATED - exceeded {max_tokens} token limit]\n"
        "The tool output was truncated. If this MCP server provides pagination or filtering tools, "
        "use them to retrieve specific portions of the data."
    )


def size_text(size: int) -> str:
    """Bytes as a person reads them: 812 bytes, 4.3 KB, 10.1 MB (decimal units)."""
    if size < 1000:
        return f"{size} bytes"
    if size < 1_000_000:
        return f"{size / 1000:.1f} KB"
    return f"{size / 1_000_000:.1f} MB"


def describe(tokens: int, max_tokens: int, full_bytes: int, kept_bytes: int) -> str:
    """The one sentence the page and the history show about a cut result: what the tool returned,
    what is shown, and what can be downloaded (all of it, or its first part when over the cap)."""
    returned = (
        f"The tool returned about {tokens:,} tokens ({size_text(full_bytes)}), over the {max_tokens:,}-token limit"
    )
    shown = f"the first {max_tokens:,} tokens are shown"
    if kept_bytes >= full_bytes:
        kept = f"the whole output ({size_text(full_bytes)}) can be downloaded"
    else:
        kept = f"its first {size_text(kept_bytes)} (of {size_text(full_bytes)}) can be downloaded"
    return f"{returned}: {shown}, and {kept}."


def _block_chars(block: dict[str, Any]) -> int:
    kind = block.get("type")
    if kind == "text":
        return len(block.get("text") or "")
    if kind in ("image", "audio"):
        return IMAGE_TOKEN_ESTIMATE * CHARS_PER_TOKEN
    return len(json.dumps(block))


def estimate_tokens(result: dict[str, Any]) -> int:
    """O(n) in characters, no tokenizer: 4 characters a token, 1,600 an image."""
    chars = sum(_block_chars(block) for block in result.get("content") or [])
    return chars // CHARS_PER_TOKEN


def count_tokens(text: str) -> int:
    """A closer count for text near the limit: words (in pieces of up to 8 characters), marks and
    runs of white space, roughly as a BPE tokenizer splits them. There is no network tokenizer here."""
    return sum(1 for _ in _TOKEN.finditer(text))


def _closer_count(result: dict[str, Any], stop_above: int) -> int | None:
    """The closer count, or None as soon as it passes `stop_above`: whether a 10 MB text is over the
    limit is known after the limit's worth of it, and counting all of it took most of a second."""
    total = 0
    for block in result.get("content") or []:
        if block.get("type") != "text":
            total += _block_chars(block) // CHARS_PER_TOKEN
        else:
            for _ in _TOKEN.finditer(block.get("text") or ""):
                total += 1
                if total > stop_above:
                    return None
        if total > stop_above:
            return None
    return total


@dataclass
class Truncation:
    result: dict[str, Any]
    truncated: bool
    tokens: int


def truncate_result(result: dict[str, Any], max_tokens: int = DEFAULT_MAX_OUTPUT_TOKENS) -> Truncation:
    """The result cut to about `max_tokens`, with the notice appended when anything was cut."""
    estimate = estimate_tokens(result)
    structured = result.get("structuredContent")
    structured_chars = len(json.dumps(structured)) if structured is not None else 0
    max_chars = max_tokens * CHARS_PER_TOKEN
    if estimate <= max_tokens * THRESHOLD_FACTOR and structured_chars <= max_chars:
        return Truncation(result, False, estimate)
    counted = _closer_count(result, max_tokens)
    if counted is not None and structured_chars <= max_chars:
        return Truncation(result, False, counted)
    # Over the limit: the cheap estimate stands for the size (the closer count stopped at the limit).
    tokens = max(estimate, max_tokens + 1) if counted is None else counted

    kept: list[dict[str, Any]] = []
    used = 0
    for block in result.get("content") or []:
        room = max_chars - used
        if room <= 0:
            break
        size = _block_chars(block)
        if size <= room:
            kept.append(block)
            used += size
        elif block.get("type") == "text":
            kept.append({**block, "text": block["text"][:room]})
            used = max_chars
        else:
            # Claude Code compresses an image that does not fit; without an imaging library it is left out.
            kept.append({"type": "text", "text": f"[{block.get('type')} omitted: over the output limit]"})
            used = max_chars
    kept.append({"type": "text", "text": notice(max_tokens)})
    cut = {**result, "content": kept}
    if structured_chars > max_chars:
        cut["structuredContent"] = None
    return Truncation(cut, True, tokens)
