"""Labs: the plumbing shared by both backends, and the learner's command line.

``python -m labs train|sample|bench`` (see ``labs/__main__.py``).

* ``data.py``: the Tiny Shakespeare corpus, the train/val split, batches.
* ``checkpoint.py``: safetensors + JSON checkpoints, identical for both backends.
* ``backends.py``: one adapter per backend (NumPy, PyTorch), one interface.
* ``train.py``, ``sample.py``, ``bench.py``: the commands.
* ``notebook.py``: the set-up the chapters' ``lab.py`` scripts share.
"""


class UserError(Exception):
    """An expected bad input (missing corpus, bad checkpoint, bad prompt...).

    The command line prints its message as one line, ``error: ...``, and exits
    with status 2 instead of showing a traceback.
    """
