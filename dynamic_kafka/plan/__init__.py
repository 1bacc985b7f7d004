"""Planning a run: splits and plans, the snapshots the planner reads, the pure planner, and the run summary."""
