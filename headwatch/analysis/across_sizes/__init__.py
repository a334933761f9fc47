"""Several runs together (docs/across-sizes.md): the joint trajectory clusters of every run's heads against types and
runs (`joint_clusters`), and consolidation times and power laws in the parameter count (`scaling`)."""
