"""Engine: the decision.  Documents are prepared (shingles, signatures, band keys:
picklable, no index, so it runs in worker processes) and then decided in order
against the store: exact copies, LSH candidates, exact verification, expiry.  Also the
file-mode pipeline that feeds it from files with a pool of preparing processes."""
