"""Heads (``/heads``): every head as one row of a sortable, filterable table of a statistic at a step (its change,
rank, ratio to random heads or to uniform attention, head types, close-approach counts, the refined LLC's spread and
flag), each row opening its head in the head explorer; and every close approach of the model's leading levels."""
