"""The learner's tools.

* ``exercises.py``: ``python -m labs start|check|status|reset``, the exercises
  (``exercises_fences.py``: the chapters, the fences, the stubs;
  ``exercises_workspace.py``: the learner's copy; ``exercises_check.py``: a
  chapter's tests run and explained).
* ``diff.py``: ``python -m labs diff``, the NumPy and PyTorch twins side by side in
  a terminal (``diff_pairs.py``: the pieces and their pairs, shared with ``docs``).
* ``docs.py``: ``python -m labs docs``, the HTML site of the chapters and their code
  (``docs_html.py``: its HTML pieces; ``docs_math.py``: the LaTeX as MathML;
  ``docs_figures.py``: the labs' figures; ``site_assets/``: its CSS, script, and
  MiniSearch for the search box).
* ``notebook.py``: the set-up every chapter's ``lab.py`` shares;
  ``notebook_export.py``: ``python -m labs notebook``, a lab as a Jupyter notebook.
"""
