"""The training concerns of :class:`~pal_lightning.module.MultiTaskModule`, one unit each.

* :mod:`~pal_lightning.training.hparams`: which module arguments configure the adapters, fix the weights'
  shape or fix the optimizer's parameter groups (each listed once);
* :mod:`~pal_lightning.training.optim`: AdamW parameter groups and the warmup/decay schedule;
* :mod:`~pal_lightning.training.guard`: the non-finite gradient guard;
* :mod:`~pal_lightning.training.checkpoint_compat`: refusing a checkpoint made for another model;
* :mod:`~pal_lightning.training.evaluation`: the one evaluation loop (validation, test and
  :class:`~pal_lightning.callbacks.ContinualEvaluation`);
* :mod:`~pal_lightning.training.simcse_step`: SimCSE as an auxiliary loss of the training step;
* :mod:`~pal_lightning.training.precision`: ``trainer.precision: auto`` (:class:`PalTrainer`, the CLI's Trainer).

Each unit with hooks pairs pure functions (testable without a Trainer) with a small mixin that wires them
into the LightningModule; :mod:`~pal_lightning.training.hparams` holds names only. Layering: these units sit beside the module (they import modeling, data-free
helpers and :mod:`pal_lightning.distributed`, never the module or the callbacks).
"""
