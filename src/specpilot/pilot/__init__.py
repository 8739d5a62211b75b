"""The pilot (R6, R8, R9): three arms through off-peak, peak and burst on one schedule, quality
gates, the rollback drill, then the analysis and the report."""
