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


def test_search_hits_and_explore_neighbours_have_their_own_ids():
    """Both are on the page at once (tab ② and tab ④): one id each, so neither is mistaken for the other; one class
    styles both."""
    results = [{"query": "q", "tuned": [], "base": []}]
    search, point = render_results(results, "bundled"), render_results(results, "bundled", "mx-point-hits")
    assert search.startswith('<div id="mx-search-hits" class="mx-results">')
    assert point.startswith('<div id="mx-point-hits" class="mx-results">')


def test_the_loss_curve_divides_each_step_by_the_loss_of_knowing_nothing():
    """Issue 28: raw InfoNCE of a batch of 200 starts at log(399) = 6.0, a last batch of 11 at log(21) = 3.0; the
    curve divides each by log(2B-1), so both read 1 (a model that knows nothing), not a jump."""
    import math

    from explorer import render

    frame = render.loss_frame([math.log(399), math.log(21), 0.3 * math.log(399)], [200, 11, 200])
    each = frame[frame.series == "each step"]["loss"].round(6).tolist()
    assert each == [1.0, 1.0, 0.3]
    smooth = render.loss_frame([5.0, 0.5, 5.0], [200, 11, 200])[lambda f: f.series == "smoothed"]["loss"].tolist()
    assert smooth[1] > 0.95 * smooth[0]  # a batch of 11 hardly moves the average (divided, it still reads lower)
    assert render.loss_frame([6.0, 3.0])[lambda f: f.series == "each step"]["loss"].tolist() == [6.0, 3.0]  # unknown B
    assert "log(2B−1)" in render.LOSS_TITLE
