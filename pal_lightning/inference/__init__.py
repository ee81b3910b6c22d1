"""A trained model's predictions: :func:`~pal_lightning.inference.pipeline.pipeline` (a saved model to
predictions in one line) and the files of ``pal-lightning predict --predict.input``
(:mod:`~pal_lightning.inference.files`), both adapters over the one inference core,
:func:`pal_lightning.module.inference.predict_items`. Nothing heavy is imported here.
"""
