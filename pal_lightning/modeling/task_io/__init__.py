"""What belongs to one task in a model, and its weights saved and loaded alone (files or folders)."""
