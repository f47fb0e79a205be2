"""The command-line jobs of ``python -m labs`` (registered in ``labs/__main__.py``).

Each command module has ``add_arguments(parser)`` and ``main(args)``: ``train``,
``sample``, ``bench``, ``bench_attention``, ``bench_generate``, ``bench_tokenizer``,
``classify`` and ``seq2seq``. ``train`` runs the steps of ``train_steps.py``
(resuming: ``train_resume.py``; several processes: ``train_distributed.py``);
``classify`` and ``seq2seq`` share their options through ``shared.py``.
"""
