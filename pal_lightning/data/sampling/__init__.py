"""Which examples each step trains on: the sampling schedules (:mod:`.schedules`), the task schedule's phases
(:mod:`.phase_plan`), the seeded streams (:mod:`.streams`), the per-task and mixed batch samplers
(:mod:`.per_task`, :mod:`.mixed`) and what sharding by rank needs from the Trainer (:mod:`.sharding`)."""
