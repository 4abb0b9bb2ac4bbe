"""Task family package: its task specs register themselves when the registry imports this package."""
