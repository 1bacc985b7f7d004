"""Planning a run: the pure planner (:mod:`.planner`). The values it reads and makes live in
:mod:`dynamic_kafka.model`.
"""
