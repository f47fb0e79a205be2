"""Labs: the course, and the command line and plumbing around it.

``python -m labs COMMAND`` (the parser: ``labs/__main__.py``). The package's rooms:

* ``01_tokens/`` ... ``17_real_models/``: the course, one chapter each
  (``README.md``, and ``lab.py``, a script that is also a notebook).
* ``commands/``: the command-line jobs (``train``, ``sample``, ``bench``, ...).
* ``plumbing/``: what the commands stand on, shared by both backends: the backend
  adapters, checkpoints, the corpus and tokenizers, Hugging Face interop.
* ``learner/``: the learner's tools: the exercises (``start``, ``check``, ...),
  ``diff``, ``docs``, and the set-up the chapters' ``lab.py`` scripts share.
"""


class UserError(Exception):
    """An expected bad input (missing corpus, bad checkpoint, bad prompt...).

    The command line prints its message as one line, ``error: ...``, and exits
    with status 2 instead of showing a traceback.
    """
