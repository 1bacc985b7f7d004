"""The run protocol: the pipeline context (the composition root), the steps before every write, the writer
guard (lock, deadline, lease), a run with its recovery and abandon, and the sink-ahead check and repair.
"""
