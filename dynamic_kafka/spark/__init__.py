"""Spark: the session (its jars and class data archive), reading planned ranges from Kafka, decoding, output schema."""
