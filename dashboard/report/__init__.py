"""The weekly report (issue #7): numbers, summary, HTML, PDF.

    report = build(wh.reader, week="2026-W47", now=now, options=ReportOptions())
    rows = write_report(report, "reports/")      # HTML + PDF, rows for the reports table

``model`` gathers the figures (warehouse/queries/weekly.py) of a week and the week
before; ``summary`` writes the plain-language lines; ``render`` draws the charts with
the dashboard's figure builders into one self-contained HTML file; ``pdf`` prints it
with headless Chromium; ``generate`` ties them to the warehouse and the outbox.
"""

from dashboard.report.model import Report, ReportOptions, build
from dashboard.report.render import render_html, write_report

__all__ = ["Report", "ReportOptions", "build", "render_html", "write_report"]
