"""The model families the job reads, one adapter each.

A family's adapter (`families.family.Family`; one module each: `gpt_neox`, `gpt2`, `llama`) declares together its
tensor names and their slicing into the per-head layout, its block layout, its cost geometry and, where it has one,
its forward pass for the batched refined-LLC sampler. `families.registry` lists the adapters and is what every
dispatch on a checkpoint's ``model_type`` asks; `families.extract` (per-head factors), `families.blocks` (whole-layer
weights) and `families.forward` (the functional forward) run any family's adapter. Adding a family is its module,
its entry in `families.registry.FAMILIES`, its planted test and its row of the docs' table (docs/precompute.md,
"Model families").
"""
