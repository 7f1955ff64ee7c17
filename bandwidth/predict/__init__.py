"""A model of a distributed step, calibrated on this tool's own measurements.

``model`` (the formulas: resources in seconds, the binding one), ``params`` (the measured
parameters and their file), ``jobs`` (placement and MXNet's key rule -> the model's Job), ``plan``
(``--plan``: bytes per host, imbalance, a better placement), ``calibrate`` (measuring the
parameters on a lab), ``cli`` (``python -m bandwidth.predict``). docs/formulas.md derives it.

``labrun`` -- one measured run on a lab, shared by the calibration and the check; ``runline`` --
``measure.py --predict``'s lines beside the measured step.
"""
