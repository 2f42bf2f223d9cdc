"""Plumbing every package may use: shared enumerations, crash points, fsync, progress, time, the
machine's facts."""
