"""Judge validation: label sets, agreement metrics with intervals, evaluations, calibration."""
