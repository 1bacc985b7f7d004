"""Stream metadata: models, the metadata service interface and its implementations, subscribers, resolving, watching."""
