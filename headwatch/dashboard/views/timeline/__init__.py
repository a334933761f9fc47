"""Timeline (``/timeline``): what happened in a run on one time axis: the loss with its developmental stages shaded,
every event (head types emerging, rLLC rises, weights leaving their Marchenko-Pastur law, level crossings) each a link
to its evidence, the essential dynamics, the head types and the study's open question."""
