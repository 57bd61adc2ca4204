"""Print an HTML file to PDF with headless Chromium (Debian's ``chromium``).

A fresh profile directory per run, no network services, no first-run UI, no header or
footer; ``--virtual-time-budget`` lets the inline plotly.js draw every chart before the
page is printed. The file is written next to its final name and renamed, so a reader
never sees half a PDF.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from gpulens.settings import default


class PdfError(RuntimeError):
    """Chromium is missing or failed; the message says which and how."""


def chromium_path(name: str = default("reports.chromium")) -> str:
    found = shutil.which(name)
    if not found:
        raise PdfError(f"{name} not found: install Debian's chromium package, set "
                       "reports.chromium to its path, or turn reports.pdf off")
    return found


def command(chromium: str, html: Path, pdf: Path, profile: Path) -> list[str]:
    return [chromium, "--headless=new", "--no-sandbox", "--disable-gpu",
            "--no-pdf-header-footer", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--no-first-run",
            "--disable-extensions", "--hide-scrollbars", "--virtual-time-budget=15000",
            f"--user-data-dir={profile}", f"--print-to-pdf={pdf}", html.resolve().as_uri()]


def html_to_pdf(html: str | os.PathLike, pdf: str | os.PathLike, *,
                chromium: str = default("reports.chromium"),
                timeout_s: float = default("reports.pdf_timeout_s")) -> Path:
    """Render ``html`` (a file) into ``pdf``; returns the PDF's path."""
    exe = chromium_path(chromium)
    html, pdf = Path(html), Path(pdf)
    tmp_pdf = pdf.with_name(pdf.name + ".part")
    with tempfile.TemporaryDirectory(prefix="gpulens-chromium-") as profile:
        try:
            done = subprocess.run(command(exe, html, tmp_pdf, Path(profile)),
                                  capture_output=True, text=True, timeout=timeout_s,
                                  env={**os.environ, "HOME": profile})
        except subprocess.TimeoutExpired:
            tmp_pdf.unlink(missing_ok=True)
            raise PdfError(f"chromium did not print {html.name} within {timeout_s:.0f} s"
                           ) from None
    if done.returncode != 0 or not tmp_pdf.exists() or tmp_pdf.stat().st_size == 0:
        tmp_pdf.unlink(missing_ok=True)
        tail = (done.stderr or "").strip().splitlines()[-3:]
        raise PdfError(f"chromium failed to print {html.name} (exit {done.returncode}): "
                       + " | ".join(tail))
    os.replace(tmp_pdf, pdf)
    return pdf
