"""Decoding a record's key and value as Spark column expressions: the one door (:mod:`.prepared`) and,
behind it, the bytes/string/json formats, the registry and schema-file formats and Protobuf.
"""
