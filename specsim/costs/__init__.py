"""What passes cost: the one pass-cost interface and its measured-grid implementation (ARCHITECTURE.md)."""
