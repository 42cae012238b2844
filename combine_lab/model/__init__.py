"""Modelled NPU time: the kernel's operation stream replayed on a calibratable model of the
planes (params -> stream -> replay), with calibration and threshold suggestions."""
