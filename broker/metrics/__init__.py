"""Prometheus metrics of a broker: the request path's counters and histograms, the collectors that
read live state at each scrape, and the HTTP endpoint that serves them (``metrics.port``)."""
