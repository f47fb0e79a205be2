"""What the commands and the labs stand on, the same for both backends.

* ``backends.py``: one interface for both backends (:func:`make_backend`); the
  adapters are ``backends_numpy.py`` and ``backends_torch.py``.
* ``checkpoint.py``: safetensors + JSON checkpoints, identical for both backends
  (``checkpoint_format.py``: what a checkpoint holds, and its checks;
  ``checkpoint_files.py``: writes that a crash cannot leave half done).
* ``data.py``: the Tiny Shakespeare corpus, the train/val split, batches.
* ``tokenization.py``: a run's character or BPE tokenizer, cached.
* ``interop_gpt2.py``, ``interop_llama.py``: Hugging Face GPT-2 and Llama weights in
  and out (``interop.py``: the helpers both use).
* ``importing.py``, ``exporting.py``: real models in and out from the command line
  (``labs import``, ``labs export``), over ``hf_files.py`` (Hugging Face directories,
  read and written with safetensors and JSON) and ``nanogpt.py`` (nanoGPT's ``ckpt.pt``
  and ``meta.pkl``, read without running their pickles).
* ``runtime.py``: process-level settings (the memory allocator).
* ``tasks.py``: the model adapter of the two non-GPT tasks (``TaskModel``), whose
  data come from ``tasks_speakers.py`` (who says this speech?) and
  ``tasks_sequence.py`` (reverse or sort digits).
"""
