"""The page at ``GET /`` (pal_lightning.serving.page) without a browser: it ships in the package and sends the
key where the guard looks for it. Served in place of LitServe's ``/``: test_command.py; driven in headless
Chromium against the real server: test_server.py."""

from __future__ import annotations

import fnmatch
import json
import re
from pathlib import Path

from pal_lightning.serving.guard import API_KEY_HEADER, OPEN_PATHS
from pal_lightning.serving.page import PAGE_PATH, page_html

ROOT = Path(__file__).resolve().parents[2]
SERVING = ROOT / "pal_lightning" / "serving"


def test_the_page_ships_as_package_data_and_is_small() -> None:
    # read as text: tomllib is not in Python 3.10, which the package supports
    globs = re.search(r'^"pal_lightning\.serving" = (\[.*?\])$', (ROOT / "pyproject.toml").read_text(), re.M)
    assert globs, "no package-data line for pal_lightning.serving in pyproject.toml"
    shipped = [f.name for f in SERVING.iterdir() if f.is_file() and f.suffix != ".py"]
    assert shipped == ["page.html"]
    assert all(any(fnmatch.fnmatch(n, g) for g in json.loads(globs.group(1))) for n in shipped)
    html = page_html()
    assert html == (SERVING / "page.html").read_text(encoding="utf-8")
    assert html.startswith("<!doctype html>") and len(html.encode()) < 10_000  # no framework
    assert "<script src" not in html and "<link" not in html  # nothing fetched but the server's own routes
    assert API_KEY_HEADER == "x-api-key" and 'h["X-API-Key"] = ' in html  # the header the guard reads
    assert PAGE_PATH in OPEN_PATHS  # a browser opens it without headers: the key is typed into it
