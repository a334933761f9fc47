"""Developmental stages (docs/stages.md): the rule that cuts one curve into stages (`curve`), a run's stages merged
from every curve its store has and named by what forms (`run`), and essential dynamics, the trajectory of the model's
outputs and its cusps (`essential`)."""
