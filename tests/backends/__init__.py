"""Tests for evalpipe.backends."""
