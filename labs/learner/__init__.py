"""The learner's tools: the exercises (``exercises*.py``: ``labs start|check|status|reset``),
``labs diff`` (``diff*.py``), ``labs docs`` (``docs*.py``, ``site_assets/``), the labs'
shared set-up (``notebook.py``) and ``labs notebook`` (``notebook_export.py``)."""
