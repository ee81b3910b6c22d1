"""The ``pal-lightning`` command line: the dispatcher (:mod:`~pal_lightning.cli.main`), ``fit`` /
``validate`` / ``test`` / ``predict`` (:mod:`~pal_lightning.cli.fit`), ``pretrain``
(:mod:`~pal_lightning.cli.pretrain`), help, predictions on a user's own text, run folders, the console.

Nothing is imported here, so that ``pal-lightning --help`` only loads what it prints.
"""
