"""`bench history report`'s page in headless Chromium: every cell's trend line drawn, a click
on a cell opens its panel, the host filter hides the other host's series (the probe's
script drives the page as a reader would; tests/support/chromium.py)."""

from __future__ import annotations

import pathlib

import pytest

from bench.card.model import Card
from bench.history import page as history_page
from bench.history import schema
from tests.history.conftest import env_of, fill, night, nights, unsigned_record
from tests.support.chromium import chromium_path, probe_page

pytestmark = pytest.mark.integration

PROBE = """<script>
window.addEventListener("load", function () {
  function visible(el) { return el.getClientRects().length > 0; }
  function shown(selector) {
    return Array.from(document.querySelectorAll(selector)).filter(visible);
  }
  var svgs = Array.from(document.querySelectorAll("svg.trend"));
  var out = {trends: svgs.length};
  out.drawn = svgs.filter(function (s) {
    var line = s.querySelector("polyline");
    return visible(s) && line !== null && line.getBBox().width > 90;
  }).length;
  out.said = svgs.filter(function (s) {
    return visible(s) && s.querySelector("text.none") !== null;
  }).map(function (s) { return s.querySelector("text.none").textContent; });
  out.panels_before = shown("div.panel").length;
  var changed = document.querySelector("td.cell line.change").closest("td.cell");
  changed.click();
  var panels = shown("div.panel");
  out.panels_after = panels.length;
  out.panel_title = panels.length ? panels[0].querySelector("h2").textContent : null;
  out.panel_rows = panels.length ? panels[0].querySelectorAll("tr").length : 0;
  out.panel_first_bad = panels.length ? panels[0].textContent.indexOf("first bad") >= 0 : false;
  var host = document.getElementById("host-filter");
  host.value = "gpu02";
  host.dispatchEvent(new Event("change"));
  out.after_filter = shown("svg.trend").length;
  out.hosts_after_filter = Array.from(new Set(shown("svg.trend").map(function (s) {
    return s.closest("[data-host]").dataset.host; }))).sort();
  out.compares_after_filter = shown("section.compare").length;
  var pre = document.createElement("pre");
  pre.id = "probe"; pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>"""


def test_chromium_draws_every_trend_opens_a_panel_and_filters_by_host(
    tmp_path: pathlib.Path, card: Card
) -> None:
    records = nights(card, 12, slow_from=9) + [
        unsigned_record(night(card, n, contexts={"8K"}), env_of(n, host="gpu02"))
        for n in range(13, 19)
    ]
    target = fill(tmp_path, records)
    with schema.opened(target, create=False) as conn:
        page = history_page.report(conn, "total_tok_s", where=target.where)
    assert page.count('<svg class="trend"') == 16 + 8  # gpu01: 8K and 16K; gpu02: 8K

    probe, dom = probe_page(chromium_path(), page, PROBE, tmp_path / "chromium")

    over = [c for c in night(card, 1).plan.cells if not c.run]
    assert [(c.context_label, c.concurrency) for c in over] == [("16K", 128)]
    assert probe["trends"] == 24 and probe["drawn"] == 23
    assert probe["said"] == ["over capacity"]  # 16K x 128: no line, its status
    assert probe["panels_before"] == 0
    assert probe["panels_after"] == 1 and probe["panel_title"] == "8K:64: total_tok_s"
    # Both hosts' series of the cell, a row per run and a header each, and the change.
    assert probe["panel_rows"] == (12 + 1) + (6 + 1)
    assert probe["panel_first_bad"] is True
    assert probe["after_filter"] == 8 and probe["hosts_after_filter"] == ["gpu02"]
    assert probe["compares_after_filter"] == 1
    assert "night-18 against night-17" in dom
