"""The sweep driver's execution: running a plan on Ray under leases (runner)."""
