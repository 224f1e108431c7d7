"""Calibration: activation statistics, threshold search, quantizers, bias correction."""
