"""The reliability report as one markdown document (string in, string out)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

METHOD_NOTES: tuple[str, ...] = (
    "pass@1 = successes / clean trials; system errors are counted apart and never scored.",
    "pass@k (at least one of k) and pass^k (all k) are unbiased per-task estimators "
    "1 - C(n-c,k)/C(n,k) and C(c,k)/C(n,k) (tau-bench, arXiv 2406.12045), averaged over tasks, "
    "each task with its own clean trial count; the plug-in (c/n)^k is biased and labelled so.",
    "Intervals of pass@1, pass@k, pass^k and of the change (tuned - base) are a paired task-level bootstrap: "
    "tasks are resampled with replacement, the same tasks for both policies (trials cluster by task, so a pooled "
    "Wilson interval would be too narrow). Beside it, an exact paired sign-flip permutation test on the per-task "
    "differences gives a one-sided p-value (the direction of the change). A change is 'improved' (or 'worse') "
    "only when both agree: the interval clear of 0 and p < 0.1; otherwise 'within noise'.",
    "P(tuned better) uses independent Jeffreys posteriors Beta(c+1/2, n-c+1/2): quadrature per task; for the "
    "mean over tasks, inversion of the characteristic function (Monte Carlo with a fixed seed only for a few "
    "wide posteriors).",
    "Costs are token usage x a versioned price table: a comparative index, not an invoice.",
)


def render_report_markdown(
    tables: Mapping[str, str],
    images: Mapping[str, str] | None = None,
    title: str = "Reliability report",
    notes: Sequence[str] = METHOD_NOTES,
    extra_sections: Mapping[str, str] | None = None,
) -> str:
    """Combine tables and image links into one markdown document.

    Args:
        tables: markdown tables keyed ``overall``, ``per_split``, ``changed_tasks``, ``per_domain``, ``per_task``
            (``reliability_tables`` output); any other key becomes its own section.
        images: caption -> link (relative path or URL) of a PNG, shown after the
            overall table as ``![caption](link)``.
        title: the document's heading.
        notes: method notes listed under the title.
        extra_sections: heading -> markdown, appended at the end (e.g. the band table).

    Returns:
        The markdown text, ending with a newline.
    """
    parts = [f"# {title}", ""]
    if notes:
        parts += [f"- {note}" for note in notes] + [""]
    headings = {
        "overall": "Overall: base vs tuned",
        "per_split": "Per split (in distribution, out of distribution)",
        "changed_tasks": "Tasks that changed (base and tuned counts)",
        "per_domain": "Per domain",
        "per_task": "Per task",
    }
    if "overall" in tables:
        parts += [f"## {headings['overall']}", "", tables["overall"], ""]
    for caption, link in (images or {}).items():
        parts += [f"![{caption}]({link})", ""]
    for key in ("per_split", "changed_tasks", "per_domain", "per_task"):
        if key in tables:
            parts += [f"## {headings[key]}", "", tables[key], ""]
    for key, table in tables.items():
        if key not in headings:
            parts += [f"## {key.replace('_', ' ')}", "", table, ""]
    for heading, body in (extra_sections or {}).items():
        parts += [f"## {heading}", "", body, ""]
    return "\n".join(parts).rstrip("\n") + "\n"
