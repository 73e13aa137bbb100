"""Reports people can read: one self-contained, offline HTML page per run log (no model needed).

``page`` (escaping, redaction, the CSP, private file writes), ``svg`` (plots from data),
``score_page`` (context heatmap, profiles, λ sweep) and ``audit_page`` (ROC, score
histograms, ε against theoretical and exact ε, privacy–utility).
"""
