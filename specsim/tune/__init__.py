"""``specsim tune``: search speculative-decoding deployments for a load and an objective.

One module per concept: :mod:`.kinds` (drafting kinds, the registry hook), :mod:`.trial` (a simulation as a
pure function of a frozen configuration), :mod:`.space` (the search space and its grammar),
:mod:`.objective`, :mod:`.executor` (local processes or Ray), :mod:`.study` (Optuna ask/tell in batches,
storage), :mod:`.paste` (engine settings), :mod:`.tune_report`, :mod:`.tune_text`, :mod:`.tune_plots`.
Optuna and Ray are the ``tune`` extra, imported only when a study runs.
"""
