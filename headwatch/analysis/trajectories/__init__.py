"""Per-head training trajectories of one run (docs/views/trajectories.md): the trajectory map, its normalisations,
neighbours, embedding and k-means (`maps`), whether the trajectories' clusters follow the head types
(`type_association`), and the permutation p-values, their Monte Carlo error and Holm's correction those tests are
read with (`significance`)."""
