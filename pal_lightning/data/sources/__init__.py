"""Data sources: the readers of every supported file format with strict row validation, the text
clean-up applied while reading, ``datasets``-backed (``format: hf``) sources and the packaged demo set."""
