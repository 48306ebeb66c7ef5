from sessions.mcp.truncation import IMAGE_TOKEN_ESTIMATE, count_tokens, notice, truncate_result


def text(n: int) -> dict:
    return {"content": [{"type": "text", "text": "x" * n}], "structuredContent": None, "isError": False}


def test_small_results_pass_untouched():
    result = text(1000)
    cut = truncate_result(result, max_tokens=25_000)
    assert cut.result is result and not cut.truncated


def test_text_is_cut_at_the_limit_with_the_notice():
    cut = truncate_result(text(1_000_000), max_tokens=25_000)
    assert cut.truncated
    first, last = cut.result["content"]
    assert len(first["text"]) == 100_000  # 25,000 tokens at 4 characters a token
    assert last["text"].startswith("[OUTPUT TRUNCATED - exceeded 25000 token limit]")
    assert "pagination or filtering tools" in last["text"]


def test_near_the_limit_a_closer_count_decides():
    # 60,000 characters of short words is ~30,000 tokens by the cheap estimate's 4-per-token... but
    # "ab " repeated is 2 tokens per 3 characters by the closer count: 40,000 tokens → cut.
    many_words = {"content": [{"type": "text", "text": "ab " * 20_000}]}
    assert truncate_result(many_words, max_tokens=25_000).truncated
    # Long unbroken words count ~1 token per 8 characters: 80,000 characters → ~10,000 tokens → kept.
    long_words = {"content": [{"type": "text", "text": ("abcdefgh" * 10 + " ") * 1_000}]}
    cut = truncate_result(long_words, max_tokens=25_000)
    assert not cut.truncated and cut.tokens < 25_000


def test_images_count_1600_tokens_and_are_left_out_past_the_limit():
    image = {"type": "image", "data": "AAAA", "mimeType": "image/png"}
    result = {"content": [image] * 20}
    cut = truncate_result(result, max_tokens=IMAGE_TOKEN_ESTIMATE * 3)
    images = [b for b in cut.result["content"] if b["type"] == "image"]
    assert len(images) == 3 and cut.truncated
    assert cut.result["content"][-1]["text"] == notice(IMAGE_TOKEN_ESTIMATE * 3)


def test_huge_structured_content_is_dropped():
    result = {"content": [{"type": "text", "text": "ok"}], "structuredContent": {"rows": ["r" * 100] * 5000}}
    cut = truncate_result(result, max_tokens=1000)
    assert cut.truncated and cut.result["structuredContent"] is None


def test_count_tokens_splits_words_marks_and_space():
    assert count_tokens("Hello, world!") == 5


def test_the_notice_says_what_the_tool_returned_what_is_shown_and_what_can_be_downloaded():
    from sessions.mcp.truncation import describe

    # A 10 MB result: its size and the limit, the part shown, and the whole of it to download.
    assert describe(2_527_497, 25_000, 10_109_988, 10_109_988) == (
        "The tool returned about 2,527,497 tokens (10.1 MB), over the 25,000-token limit: "
        "the first 25,000 tokens are shown, and the whole output (10.1 MB) can be downloaded."
    )
    # Over the download cap: only its first part is kept, and the notice says so.
    assert describe(13_107_200, 25_000, 52_428_900, 20_971_520).endswith(
        "and its first 21.0 MB (of 52.4 MB) can be downloaded."
    )
