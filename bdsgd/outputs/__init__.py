"""What a job leaves behind: files written atomically (``io``), the provenance stamped on them
(``provenance``) and the Weights & Biases run that mirrors them (``tracking``)."""
