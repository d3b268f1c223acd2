"""explorer.render: what the user reads is escaped, and the search tables mark what only one encoder found."""

from __future__ import annotations

from explorer.render import render_results


def test_render_results_escapes_and_marks_differences():
    results = [
        {
            "query": "<script>x</script>",
            "tuned": [{"rank": 1, "text": "<b>a</b>", "score": 0.9, "only_here": True}],
            "base": [{"rank": 1, "text": "b", "score": 0.8, "only_here": True}],
        }
    ]
    out = render_results(results, "bundled")
    assert "<script>" not in out and "&lt;script&gt;" in out and "&lt;b&gt;a&lt;/b&gt;" in out
    assert "mx-only-tuned" in out and "mx-only-base" in out and "1 of 1 tuned hits are new" in out
