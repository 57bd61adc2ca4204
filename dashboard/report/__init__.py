"""The weekly report (issue #7): numbers, summary, HTML, PDF.

    report = build(wh.reader, week="2026-W47", now=now, options=ReportOptions())
    rows = write_report(report, "reports/")      # HTML + PDF, rows for the reports table

``build`` gathers the figures (warehouse/queries/weekly.py) of a week and the week
before into ``model.Report``; ``summary`` writes the plain-language lines; ``render``
draws the charts with the dashboard pages' figure builders (``dashboard/figures/``) into
one self-contained HTML file; ``pdf`` prints it with headless Chromium; ``generate``
ties them to the warehouse and the outbox; ``schedule`` runs it weekly inside the
service; ``api`` serves it over HTTP.
"""

from dashboard.report.build import build
from dashboard.report.model import Report, ReportOptions
from dashboard.report.render import render_html, write_report

__all__ = ["Report", "ReportOptions", "build", "render_html", "write_report"]
