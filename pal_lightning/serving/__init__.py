"""``pal-lightning serve``: an HTTP server for every task of one model (docs/serving.md).

The request checks (:mod:`~pal_lightning.serving.schema`, :mod:`~pal_lightning.serving.guard`) and the answers
(:mod:`~pal_lightning.serving.answers`) need no extra; the server itself (:mod:`~pal_lightning.serving.api`,
:mod:`~pal_lightning.serving.command`) runs on LitServe, the ``serve`` extra, imported only when serving.
"""
