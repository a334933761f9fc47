"""Running a job: the run loop (`run`), its options and settings (`settings`), the run state and its commits
(`state`), what the lenses' computations share (`context`), and the executors that compute each checkpoint
(`executor`, `ray_executor`, `work`, `prefetch`, `factors`)."""
