"""Report tables and plots: return values only, no file I/O."""

from rewardbox.report.document import METHOD_NOTES, render_report_markdown
from rewardbox.report.plots import (
    PNG_MAGIC,
    band_histogram_png,
    reliability_figure,
    reliability_png,
    training_curve_figure,
    training_curve_png,
)
from rewardbox.report.tables import (
    band_table,
    format_reliability_tables,
    markdown_preview,
    markdown_table,
    reliability_tables,
)

__all__ = [
    "METHOD_NOTES",
    "PNG_MAGIC",
    "band_histogram_png",
    "band_table",
    "format_reliability_tables",
    "markdown_preview",
    "markdown_table",
    "reliability_figure",
    "reliability_png",
    "reliability_tables",
    "render_report_markdown",
    "training_curve_figure",
    "training_curve_png",
]
