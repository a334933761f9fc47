"""What a checkpoint's weights alone say (docs/views/weights.md, similarity.md, circuits.md): every statistic of
each head (`heads`) and of each whole-layer matrix (`layers`), composition between heads (`composition`), how alike
two heads are (`similarity`) and the distances and ultrametricity read from it (`ultrametric`). The per-head
statistics themselves are `analysis.stats`, their random-matrix references `analysis.rmt`."""
