"""The IMP papers' difficulty split and its metrics: AUPRC, calibrated votes, discarded-text negatives, aggregates."""
