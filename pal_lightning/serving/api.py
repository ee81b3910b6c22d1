"""The LitServe API of a saved model: each inference worker loads the model once (``setup``), and answers each
batch of requests LitServe collects with one call of the inference core (:mod:`pal_lightning.serving.answers`).
Imports ``litserve`` (the ``serve`` extra): only :mod:`pal_lightning.serving.command` imports this module,
after checking that it is installed.
"""

# no ``from __future__ import annotations``: LitServe reads decode_request's and encode_response's annotations
# at run time to choose how the route parses the body (none: JSON) and what it answers (none: JSON)

from typing import Any

import litserve as ls

from pal_lightning.serving.answers import answer_requests
from pal_lightning.serving.schema import ServeRequest


class PalAPI(ls.LitAPI):  # litserve is untyped: LitAPI is Any to the checker
    """``POST /predict`` for every task of one model.

    Args:
        model: a ``save_pretrained`` folder or hub id (``None`` with ``ckpt``).
        ckpt: a ``.ckpt`` file (``None`` with ``model``).
        max_batch_size: the most requests LitServe puts in one batch.
        batch_timeout: seconds LitServe waits for a batch to fill.
    """

    def __init__(
        self, model: str | None, ckpt: str | None, max_batch_size: int, batch_timeout: float
    ) -> None:
        super().__init__(max_batch_size=max_batch_size, batch_timeout=batch_timeout)
        self.model_path, self.ckpt = model, ckpt
        self.module: Any = None

    def setup(self, device: str) -> None:
        """Load the model on ``device`` (once per worker), in eval mode."""
        from pal_lightning.inference.pipeline import load_model

        self.module = load_model(self.model_path, self.ckpt).to(device).eval()

    def decode_request(self, request, **kwargs):  # type: ignore[no-untyped-def]  # see the note on imports
        """The checked request (:class:`~pal_lightning.serving.guard.Guard` rewrote the body canonically)."""
        return ServeRequest.from_canonical(request)

    def predict(self, x: Any, **kwargs: Any) -> Any:
        """The answers of a batch (a list of requests), or of one request when batching is off."""
        requests = x if isinstance(x, list) else [x]
        answers = answer_requests(self.module, requests)
        return answers if isinstance(x, list) else answers[0]

    def encode_response(self, output, **kwargs):  # type: ignore[no-untyped-def]  # see the note on imports
        """The answer as it is (JSON-ready already)."""
        return output
