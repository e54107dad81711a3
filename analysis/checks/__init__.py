"""The checks around the fits: noise, residuals, held-out runs, extrapolation, agreement, conventions, schedules, propagation, published values."""
