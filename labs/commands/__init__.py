"""The command-line jobs of ``python -m labs`` (registered in ``labs/__main__.py``).

Each module is one command, with ``add_arguments(parser)`` and ``main(args)``:
``train``, ``sample``, ``bench``, ``bench-attention``, ``bench-generate``,
``bench-tokenizer``, ``classify`` and ``seq2seq``.
"""
