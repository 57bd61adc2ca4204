"""The report's PDF: headless Chromium prints it, poppler's pdftoppm turns its pages into
images, and the pages carry ink; the Reports page then lists the files (#7)."""

from __future__ import annotations

import subprocess

import numpy as np
import pytest

from dashboard.report import generate as gen
from tests.support.integration import need
from tests.support.report import NOW, WEEK, report_config, seeded_copy
from warehouse import Warehouse
from warehouse.queries import reports as qr

pytestmark = pytest.mark.integration


def read_pgm(path) -> np.ndarray:
    """A binary PGM (P5, 8-bit) as a 2-D array."""
    data = path.read_bytes()
    parts = data.split(maxsplit=4)
    assert parts[0] == b"P5"
    w, h = int(parts[1]), int(parts[2])
    return np.frombuffer(parts[4][: w * h], dtype=np.uint8).reshape(h, w)


def test_pdf_pages_render_and_are_listed(tmp_path):
    chromium = need("chromium", "chromium")
    pdftoppm = need("pdftoppm", "poppler-utils")
    cfg = report_config(tmp_path, reports__chromium=chromium)
    with Warehouse(seeded_copy(tmp_path)) as wh:
        out = gen.generate(wh, cfg, week=WEEK, now=NOW, send=False)
        listed = qr.list_reports(wh.reader())
    pdf = next(p for p in out["files"] if p.endswith(".pdf"))
    subprocess.run([pdftoppm, "-r", "30", "-gray", pdf, str(tmp_path / "page")], check=True)
    pages = sorted(tmp_path.glob("page-*.pgm"))
    assert len(pages) >= 3
    for page in pages:
        ink = (read_pgm(page) < 200).mean()
        assert ink > 0.005, f"{page.name} is blank"
    first = read_pgm(pages[0])
    assert (first < 200).mean() > 0.03  # title, summary and the first table
    assert sorted(listed["format"]) == ["html", "pdf"]
    assert set(listed["path"]) == set(out["files"]) and (listed["size_bytes"] > 0).all()
