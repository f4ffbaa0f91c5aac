"""mosaic: plan large Mixture-of-Experts pretraining runs (the MOSAIC method, arXiv 2608.10605)."""

__version__ = "0.1.0"
