"""Issue 32, item 2: the Markdown tables fit TensorBoard's Text card.

TensorBoard's Text card gives a table the card's width and shares it out by each column's
one-line width, breaking words anywhere once they add up to more: the 19-column
``similarity/report`` wrapped a layer type like "pool" letter by letter. Every table of the
text cards a call writes into its quantized run now fits, and no word in a cell is split
over two lines (measured on the rendered text: each word's boxes sit on one line).
"""

from __future__ import annotations

import re

import pytest

from tests.e2e import browser, pages
from tests.e2e.logs import CALLS

pytestmark = pytest.mark.e2e

TAGS = ("summary", "similarity/causes", "similarity/report")

# For each table of the card: its width, its container's width, and the words of its
# cells (<th>, <td>) whose rendered boxes lie on more than one line.
_MEASURE = """
const tables = [];
walkAll(el, n => {
  if (n.nodeName !== 'TABLE') return;
  const split = [];
  for (const cell of n.querySelectorAll('th, td')) {
    const texts = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
    let t;
    while ((t = texts.nextNode())) {
      for (const m of t.textContent.matchAll(/\\S+/g)) {
        const r = document.createRange();
        r.setStart(t, m.index);
        r.setEnd(t, m.index + m[0].length);
        const lines = new Set(Array.from(r.getClientRects()).filter(b => b.width > 0).map(b => Math.round(b.top)));
        if (lines.size > 1) split.push(m[0]);
      }
    }
  }
  tables.push({width: n.getBoundingClientRect().width, room: n.parentElement.getBoundingClientRect().width,
               cells: n.querySelectorAll('td').length, split: split});
});
return tables.length && tables.every(t => t.cells > 0) ? tables : null;
"""


@pytest.mark.parametrize("key", CALLS)
def test_no_table_of_the_text_cards_splits_a_word(board, calls, driver, key):
    run = calls[key].name("5_quantized_graph")
    pages.open_dashboard(driver, board, pages.fragment("text", f"^({'|'.join(map(re.escape, TAGS))})$",
                                                       f"^{re.escape(run)}$"), [run])  # fmt: skip
    for tag in TAGS:
        tables = browser.wait_for(
            lambda tag=tag: pages.on_card(driver, "tf-text-loader", run, tag, _MEASURE),
            pages.DASHBOARD_TIMEOUT_S, f"the tables of {tag}",
        )  # fmt: skip
        for table in tables:
            assert table["split"] == [], (tag, table)
            assert table["width"] <= table["room"] + 1, (tag, table)
    report = pages.card_rows(driver, "tf-text-loader", run, "similarity/report")
    assert len(report) == len(calls[key].info.similarity.layers) + 1  # every layer, under one header row
