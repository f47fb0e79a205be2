"""The command-line jobs of ``python -m labs`` (registered in ``labs/__main__.py``).

Each command module has ``add_arguments(parser)`` and ``main(args)``: ``train``,
``sample``, ``bench`` (``bench_more`` holds ``bench-attention``, ``-generate``,
``-gpt2`` and ``-tokenizer``), ``classify``, ``seq2seq``, ``import_model`` (``labs import``),
``export`` and ``inspect_run`` (``labs inspect``). ``train`` runs the steps of
``train_steps.py`` (resuming: ``train_resume.py``; fine-tuning a checkpoint:
``train_init.py``; several processes: ``train_distributed.py``);
``classify`` and ``seq2seq`` share their options through ``shared.py``.
"""
