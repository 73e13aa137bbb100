"""Privacy mathematics that needs no model: empirical ε lower bounds and estimates from audit
scores (``estimators``) and mechanism calibration and accounting (``calibration``). Importable
with numpy and scipy alone."""
