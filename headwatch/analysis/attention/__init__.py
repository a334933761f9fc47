"""What heads do on real text, from their attention patterns (docs/head-types.md): the patterns' statistics
(`patterns`: entropy, span, sink, previous-token and induction scores) and the head types decided from them against
uniform-attention nulls (`head_types`)."""
