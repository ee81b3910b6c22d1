"""A downstream project's package, as another project would write one: a subclass of ``MultiTaskModule`` in an
importable module (tests/module/test_subclass_loading.py saves and loads it through every entry point)."""
