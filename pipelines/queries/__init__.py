"""Post-incident query library over the trace schema, and the incident report."""
