"""Watch ingestion: Kubernetes watch streams onto `<prefix>.watch-events`, resume cursors alongside."""
