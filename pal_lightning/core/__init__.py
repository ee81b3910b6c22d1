"""Core: what every layer above may use: the user-error type, file writes, distributed helpers, the
private-API compatibility layer, the contracts between components, plain values, the batch keys and
where encoder weights come from. Imports nothing else of the package."""
