"""What the Trajectory map computes before it draws, pure (no streamlit): one run's map (`maps`), several runs' heads
on one map (`joint`), and whether the trajectory clusters correspond to head types (`association`)."""
