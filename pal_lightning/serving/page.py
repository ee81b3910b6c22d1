"""The page ``pal-lightning serve`` shows at ``GET /`` (``page.html``, package data): pick a task, type a text
or a pair, see the label and each class's probability, or the score. It calls ``GET /tasks`` and ``POST
/predict`` with the API key the user types, so the page itself is open (a browser opening an address sends no
header).
"""

from __future__ import annotations

from importlib import resources
from typing import Any

#: Where the page is served.
PAGE_PATH = "/"


def page_html() -> str:
    """The page's HTML (styles and script inline)."""
    return resources.files(__package__).joinpath("page.html").read_text(encoding="utf-8")


def add_page(app: Any) -> None:
    """Serve the page at ``GET /`` of the FastAPI ``app``, in place of LitServe's ``litserve running``."""
    from fastapi.responses import HTMLResponse  # LitServe's web framework (the ``serve`` extra)

    html = page_html()
    app.router.routes[:] = [route for route in app.router.routes if getattr(route, "path", None) != PAGE_PATH]

    async def page() -> HTMLResponse:
        return HTMLResponse(html)

    app.add_api_route(PAGE_PATH, page, methods=["GET"], include_in_schema=False)
