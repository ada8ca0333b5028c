"""Metrics, benchmark runners, and the narrated samples they run on."""
