"""Reusable test infrastructure (servers, fixtures) shared by tests and benches."""
