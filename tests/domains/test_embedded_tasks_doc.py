"""docs/embedded_tasks.md shows the counts of the checked-in task sets; the query mask works."""

from __future__ import annotations

from pathlib import Path

from rewardbox.domains.stats import DOMAINS, domain_stats, mask_query, render_markdown

DOC = Path(__file__).resolve().parents[2] / "docs" / "embedded_tasks.md"
START, END = (
    "<!-- tables: python -m rewardbox.domains.stats --markdown -->\n",
    "<!-- end tables -->",
)


def test_the_page_tables_are_those_of_the_generated_tasks():
    text = DOC.read_text(encoding="utf-8")
    tables = text[text.index(START) + len(START) : text.index(END)]
    assert tables == render_markdown([domain_stats(d) for d in DOMAINS])


def test_mask_query_hides_what_a_template_fills_in():
    a = mask_query(
        "Hi, I'm Ana Lopez (ana.lopez@mail.test). Cancel ORD-6011, refund 59.70 on 2025-06-15.",
        {"Ana", "Lopez"},
    )
    b = mask_query(
        "Hi, I'm Ben Sato (ben.sato@mail.test). Cancel ORD-6122, refund 4.00 on 2025-06-01.",
        {"Ben", "Sato"},
    )
    assert a == b == "Hi, I'm <name> <name> (<email>). Cancel <id>, refund <n> on <n>."
