"""What the commands and the labs stand on, the same for both backends.

* ``backends.py``: one adapter per backend (NumPy, PyTorch), one interface.
* ``checkpoint.py``: safetensors + JSON checkpoints, identical for both backends.
* ``data.py``: the Tiny Shakespeare corpus, the train/val split, batches.
* ``tokenization.py``: the character or BPE tokenizer of a run, cached.
* ``interop.py``: Hugging Face GPT-2 and Llama weights in and out.
* ``runtime.py``: process-level settings (the memory allocator).
* ``tasks.py``: the classification and sequence-to-sequence tasks and their model.
"""
