"""The configuration: the project and pipeline models and their loader, validation errors in the words of
the YAML, ``{stream}`` sink templates, cron expressions and Flink's Kafka source options. Imports only
the kernel and the models of the stages (registry, publications, the output columns).
"""
