"""The ledger a sweep leaves in its working folder (MLflow store, artifacts, checkpoints) as a
whole: archive (pack it into one portable file and unpack it elsewhere to resume).

CLI: python -m pipeline.ledger pack OUT.tar.gz | unpack ARCHIVE
"""
