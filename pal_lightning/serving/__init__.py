"""``pal-lightning serve``: an HTTP server for every task of one model (docs/serving.md); only
:mod:`~pal_lightning.serving.api` needs LitServe (the ``serve`` extra), imported when serving.
"""
