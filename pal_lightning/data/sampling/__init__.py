"""Which examples each step trains on: sampling schedules, the task schedule's phases, seeded streams and the
per-task and mixed batch samplers."""
