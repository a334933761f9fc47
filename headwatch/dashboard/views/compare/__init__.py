"""Compare runs (``/compare``): two or more runs side by side, lined up in relative depth and in training time: the
statistic per run at a point of training, when each head type formed, each depth bin's mean over training and its
heads run by run, the distribution over heads, the head-type counts, the losses, and across model sizes the
emergence, consolidation and scaling of the runs and their joint trajectory clusters."""
