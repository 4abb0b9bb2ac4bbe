"""Prompt conditions (variants × shot counts × shot orders) and the spread of a task across them."""
